package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyFiles(t *testing.T) {
	if p := DefaultSet().For("any.class", "any.driver"); p.Name != "default" || p.QuarantineLease != Default().QuarantineLease {
		t.Fatalf("default set gave %+v", p)
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read policy file") {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies:\n  - name: x\n    toleranceWindow: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), "policy file "+bad) || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad file: %v", err)
	}
}

// The signals section replaces the default queries or conditions; a query with an unknown kind,
// no query or a name used twice is refused with the reason.
func TestSignalsSection(t *testing.T) {
	s, err := Parse([]byte("signals:\n  prometheus:\n    - {name: xid, query: 'DCGM_FI_DEV_XID_ERRORS{cluster=\"a\"}', kind: last}\n  uuidAttribute: gpuUUID\n"))
	if err != nil {
		t.Fatal(err)
	}
	sig := s.Signals()
	if len(sig.Prometheus) != 1 || sig.Prometheus[0].Query != `DCGM_FI_DEV_XID_ERRORS{cluster="a"}` || sig.UUIDAttribute != "gpuUUID" ||
		sig.IndexAttribute != "index" || len(sig.NodeConditions) != len(DefaultSignals().NodeConditions) {
		t.Fatalf("signals %+v", sig)
	}
	if d := DefaultSet().Signals(); len(d.Prometheus) != 6 || d.Prometheus[0].Kind != PromLast {
		t.Fatalf("default signals %+v", d)
	}
	for file, want := range map[string]string{
		"signals:\n  prometheus:\n    - {name: xid, query: q, kind: gauge}\n":                                      `kind "gauge"`,
		"signals:\n  prometheus:\n    - {name: xid, kind: last}\n":                                                 "no query",
		"signals:\n  prometheus:\n    - {name: a, query: q, kind: last}\n    - {name: a, query: r, kind: level}\n": "used twice",
		"signals:\n  prometheus:\n    - {name: Bad Name, query: q, kind: last}\n":                                  "lower-case",
		"signals:\n  nodeConditions:\n    - {type: Ready}\n":                                                       "not Ready",
		"signals:\n  prometheus:\n    - {name: a, query: q, kind: last, typo: 1}\n":                                "typo",
	} {
		if _, err := Parse([]byte(file)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", file, err, want)
		}
	}
}
