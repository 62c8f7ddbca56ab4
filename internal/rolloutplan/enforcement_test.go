package rolloutplan

import (
	"strings"
	"testing"
	"time"
)

const proofHead = "name: r\npluginResource: x.io/gpu\nphases:\n  - name: a\n    nodes: pool=a\n    classes: [{name: c, driver: d, shared: true}]\n    namespaces: [t]\n    soak: 1m\n"

func TestParseEnforcementDefaults(t *testing.T) {
	p, err := Parse([]byte(proofHead + "    enforcement: {image: load:1, share: 8Gi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := p.Phases[0].Enforcement
	if e == nil || e.Image != "load:1" || e.Share != "8Gi" {
		t.Fatalf("enforcement = %+v", e)
	}
	if e.Tenants != DefaultProofTenants || e.Noisy != DefaultProofNoisy || e.Tolerance != DefaultProofTolerance || e.Capacity != "memory" ||
		e.Namespace != DefaultProofNamespace || e.OnUnenforced != UnenforcedWholeDevice || e.NodeType != DefaultProofNodeType ||
		e.DriverVersion != DefaultProofDriverVer || len(e.Identity) != 1 || e.Identity[0] != "uuid" {
		t.Errorf("defaults = %+v", e)
	}
	if e.Duration.D() != time.Minute || e.StartDelay.D() != 15*time.Second || e.Timeout.D() != 2*75*time.Second+5*time.Minute {
		t.Errorf("durations = %s %s %s", e.Duration, e.StartDelay, e.Timeout)
	}
	if c := p.Phases[0].SharedClasses(); len(c) != 1 || c[0].Name != "c" || p.Phases[0].SharedClassNames()[0] != "c" {
		t.Errorf("shared classes = %v", c)
	}
	// A tolerance of 0 is asked for, not missing.
	p, err = Parse([]byte(proofHead + "    enforcement: {image: load:1, share: 8Gi, tolerance: 0, onUnenforced: approve}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e := p.Phases[0].Enforcement; e.Tolerance != 0 || e.OnUnenforced != UnenforcedApprove {
		t.Errorf("enforcement = %+v", e)
	}
}

// TestParseRejectsBadEnforcement: a shared class without a proof, and each bad proof field, are
// refused with the phase's line and the field.
func TestParseRejectsBadEnforcement(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"shared without proof", proofHead, "line 6: phase \"a\" makes class c shared: it needs an enforcement proof"},
		{"no image", proofHead + "    enforcement: {share: 8Gi}\n", "line 9: phase \"a\": enforcement: image is required"},
		{"no share", proofHead + "    enforcement: {image: l}\n", "share is required"},
		{"bad share", proofHead + "    enforcement: {image: l, share: lots}\n", "share \"lots\""},
		{"zero share", proofHead + "    enforcement: {image: l, share: '0'}\n", "share \"0\""},
		{"one tenant", proofHead + "    enforcement: {image: l, share: 1Gi, tenants: 1}\n", "tenants 1: want at least 2"},
		{"quiet noisy", proofHead + "    enforcement: {image: l, share: 1Gi, noisy: 0.5}\n", "noisy 0.5"},
		{"bad tolerance", proofHead + "    enforcement: {image: l, share: 1Gi, tolerance: 1.5}\n", "tolerance 1.5"},
		{"bad duration", proofHead + "    enforcement: {image: l, share: 1Gi, duration: soon}\n", "duration \"soon\""},
		{"short timeout", proofHead + "    enforcement: {image: l, share: 1Gi, duration: 1m, startDelay: 10s, timeout: 2m}\n", "timeout 2m0s: want more than"},
		{"bad choice", proofHead + "    enforcement: {image: l, share: 1Gi, onUnenforced: shrug}\n", "onUnenforced \"shrug\""},
		{"unknown field", proofHead + "    enforcement: {image: l, share: 1Gi, tenant: 3}\n", "field tenant not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

// TestProofWithoutSharedClassProvesEveryClass: a phase that asks for a proof and marks no class
// shared proves all of them; one that asks for none proves none.
func TestProofWithoutSharedClassProvesEveryClass(t *testing.T) {
	p, err := Parse([]byte(strings.Replace(proofHead, ", shared: true", "", 1) + "    enforcement: {image: l, share: 1Gi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Phases[0].SharedClasses(); len(c) != 1 {
		t.Errorf("shared classes = %v", c)
	}
	p.Phases[0].Enforcement = nil
	if c := p.Phases[0].SharedClasses(); len(c) != 0 {
		t.Errorf("shared classes without a proof = %v", c)
	}
}

// TestEnforcementEdges: each bound is where the message says it is.
func TestEnforcementEdges(t *testing.T) {
	cases := []struct {
		fields string
		ok     bool
	}{
		{"duration: 0s", false},
		{"duration: 1m, startDelay: 10s, timeout: 2m20s", false},
		{"duration: 1m, startDelay: 10s, timeout: 2m21s", true},
		{"tenants: 2", true},
		{"noisy: 1", false},
		{"noisy: 1.5", true},
		{"tolerance: 1", false},
		{"tolerance: 0.99", true},
		{"tolerance: -0.01", false},
	}
	for _, c := range cases {
		_, err := Parse([]byte(proofHead + "    enforcement: {image: l, share: 1Gi, " + c.fields + "}\n"))
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok %v", c.fields, err, c.ok)
		}
	}
}
