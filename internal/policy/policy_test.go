package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

const good = `
default:
  toleranceWindow: 2m
policies:
  - name: a100
    match: {deviceClass: gpu.example.com}
    toleranceWindow: 10m
    backoffCap: 2h
    approvalRequired: true
  - name: nics
    match: {driver: nic.example.com}
    taintEffect: NoExecute
    probe: {image: diag:1, command: [diag, --full], timeout: 2m}
    canary: {namespace: canaries}
    slackChannel: "#nics"
drivers:
  nic.example.com: {identity: [serial]}
`

const drivers = "drivers:\n  d: {identity: [uuid]}\n  e: {identity: [uuid]}\n"

func TestEmptyFileIsTheDefault(t *testing.T) {
	s, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.For("x", "y"), Default()) {
		t.Fatal("empty file is not the default policy")
	}
}

func TestBrokenFilesAreRejectedWithTheLine(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"bad duration", "policies:\n  - name: a\n    match: {driver: d}\n    toleranceWindow: soon\n", "line 4"},
		{"unknown field", "policies:\n  - name: a\n    match: {driver: d}\n    tolerance: 5m\n", "line 4"},
		{"bad effect", "policies:\n  - name: a\n    match: {driver: d}\n    taintEffect: Evict\n", "line 2"},
		{"matches nothing", "policies:\n  - name: a\n", "line 2"},
		{"no name", "policies:\n  - match: {driver: d}\n", "line 2"},
		{"duplicate name", "policies:\n  - name: a\n    match: {driver: d}\n  - name: a\n    match: {driver: e}\n" + drivers, "line 4"},
		{"driver without identity", "policies:\n  - name: a\n    match: {driver: x}\n" + drivers, "drivers.x.identity"},
		{"empty identity", "drivers:\n  d: {identity: []}\n", "identity lists no attribute"},
		{"bad probe timeout", "default:\n  probe: {timeout: never}\n", "line 2"},
		{"zero canary timeout", "default:\n  canary: {timeout: 0s}\n", "canary.timeout"},
		{"empty probe image", "default:\n  probe: {image: \"\"}\n", "probe.image"},
		{"unknown probe field", "default:\n  probe: {imgae: x}\n", "line 2"},
		{"cap below window", "default:\n  toleranceWindow: 2h\n", "backoffCap"},
		{"negative", "default:\n  heartbeatLimit: -1m\n", "heartbeatLimit"},
		{"not yaml", "policies: [\n", "line"},
		{"exit codes not numbers", "default:\n  probe: {notRunExitCodes: [in-use]}\n", `line 2: notRunExitCodes: "in-use" is not an exit code`},
		{"exit code zero", "default:\n  probe: {notRunExitCodes: [0]}\n", `"0" is not an exit code`},
		{"exit code past 255", "default:\n  canary: {notRunExitCodes: [3, 256]}\n", `"256" is not an exit code`},
		{"exit codes not a list", "default:\n  probe: {notRunExitCodes: 3}\n", "line 2: notRunExitCodes is a list of exit codes"},
		{"exit code quoted", "default:\n  probe: {notRunExitCodes: [\"3\"]}\n", `"3" is not an exit code`},
		{"no alert on not-runs", "default:\n  notRunAlertAfter: 0\n", "notRunAlertAfter must be >= 1, got 0"},
		{"not-run retry past its cap", "default:\n  notRunRetry: 1h\n", "notRunRetry must be positive and at most 30m0s, got 1h0m0s"},
		{"no not-run retry", "default:\n  notRunRetry: 0s\n", "notRunRetry must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

func TestShippedExampleParses(t *testing.T) {
	s, err := LoadFile("../../deploy/examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := s.For("gpu.sim.devicewarden.io", "gpu.sim.devicewarden.io"); p.Name != "training-gpus" || !p.ApprovalRequired ||
		len(p.Repair.Steps) != 2 || p.Repair.Steps[0].Attempts != 2 || p.Repair.RetireAfter != 3 || p.Repair.Steps[1].Kind != RepairNode {
		t.Fatalf("example policy = %+v", p)
	}
	// It shows the causes and the signals too (read, not just parsed).
	if p := s.For("", ""); p.Causes.ApplicationFaults.Limit != 5 || len(p.Causes.Rules) != 1 || p.Causes.Rules[0].First != FirstReset {
		t.Fatalf("example causes = %+v", p.Causes)
	}
	if sig := s.Signals(); len(sig.Prometheus) != 4 || sig.UUIDAttribute != "uuid" || len(sig.NodeConditions) != 3 {
		t.Fatalf("example signals = %+v", sig)
	}
}

func TestBoundaryValuesAreAccepted(t *testing.T) {
	for _, y := range []string{
		"default:\n  stabilityWindow: 0s\n",                   // no window: release right after the canary
		"default:\n  toleranceWindow: 1h\n  backoffCap: 1h\n", // a cap equal to the window: no backoff
		"default:\n  escalationThreshold: 1\n",                // escalate on the first failed device
		"default:\n  probe: {timeout: 1s}\n  canary: {timeout: 1s}\n",
	} {
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
	if _, err := Parse([]byte("default:\n  stabilityWindow: -1s\n")); err == nil || !strings.Contains(err.Error(), "stabilityWindow") {
		t.Errorf("negative stability window: %v", err)
	}
	if _, err := Parse([]byte("default:\n  sourceWait: -1m\n")); err == nil || !strings.Contains(err.Error(), "sourceWait must not be negative") {
		t.Errorf("negative source wait: %v", err)
	}
	if s, err := Parse([]byte("default:\n  sourceWait: 0s\npolicies:\n  - {name: slow, match: {deviceClass: x}, sourceWait: 20m}\n")); err != nil ||
		s.For("", "").SourceWait != 0 || s.For("x", "").SourceWait.D() != 20*time.Minute || Default().SourceWait.D() != DefaultSourceWait {
		t.Errorf("source wait: %+v, %v", s, err)
	}
	if _, err := Parse([]byte("default:\n  escalationThreshold: 0\n")); err == nil || !strings.Contains(err.Error(), "escalationThreshold") {
		t.Errorf("escalation threshold 0: %v", err)
	}
}

func TestDriversCDIAndAmbiguous(t *testing.T) {
	s, err := Parse([]byte("default:\n  ambiguous: quarantine-candidates\ndrivers:\n" +
		"  a.example.com: {identity: [uuid], cdi: claim-device}\n" +
		"  b.example.com: {identity: [uuid], cdi: device}\n" +
		"  u.example.com: {identity: [uuid], cdi: [claim-device, \"attribute:uuid\"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	styles := func(s *Set, d string) string { return strings.Join(s.CDIStyles(d), ",") }
	if styles(s, "a.example.com") != CDIClaimDevice || styles(s, "b.example.com") != CDIDevice || styles(s, "c.example.com") != "" ||
		styles(s, "u.example.com") != "claim-device,attribute:uuid" {
		t.Fatalf("styles %q %q %q", styles(s, "a.example.com"), styles(s, "b.example.com"), styles(s, "u.example.com"))
	}
	if a := s.CDIAttributes("u.example.com"); !reflect.DeepEqual(a, []string{"uuid"}) || s.CDIAttributes("a.example.com") != nil {
		t.Fatalf("attributes %v", a)
	}
	if s.For("", "x").Ambiguous != AmbiguousQuarantine || Default().Ambiguous != AmbiguousAlert {
		t.Fatal("ambiguous not read")
	}
	if w := s.WithCDI("a.example.com", CDIDevice).WithCDI("c.example.com", CDIDevice, "attribute:serial"); styles(w, "a.example.com") != CDIClaimDevice ||
		styles(w, "c.example.com") != "device,attribute:serial" {
		t.Fatal("WithCDI overrode the file or did not add")
	}
	if styles(s, "c.example.com") != "" {
		t.Fatal("WithCDI changed the original set")
	}
	for y, want := range map[string]string{
		"drivers:\n  a.example.com: {identity: [uuid], cdi: uuid}\n":              "drivers.a.example.com.cdi",
		"drivers:\n  a.example.com: {identity: [uuid], cdi: \"attribute:\"}\n":    "drivers.a.example.com.cdi",
		"drivers:\n  a.example.com: {identity: [uuid], cdi: [device, claim]}\n":   "drivers.a.example.com.cdi \"claim\"",
		"drivers:\n  a.example.com: {identity: [uuid], cdi: {attribute: uuid}}\n": "style or a list",
		"default:\n  ambiguous: guess\n":                                          "ambiguous",
	} {
		if _, err := Parse([]byte(y)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v", y, err)
		}
	}
}

func TestDriverUnits(t *testing.T) {
	set, err := Parse([]byte("drivers:\n  a.example.com: {identity: [uuid], units: {attribute: parentUUID}}\n  b.example.com: {identity: [uuid], units: {independent: true}}\n  c.example.com: {identity: [uuid]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := set.Units("a.example.com"); g.Attribute != "parentUUID" || g.Independent {
		t.Fatalf("a: %+v", g)
	}
	if g := set.Units("b.example.com"); g.Attribute != "" || !g.Independent {
		t.Fatalf("b: %+v", g)
	}
	if g := set.Units("c.example.com"); g != (device.Grouping{}) {
		t.Fatalf("c: %+v, want the counter-set default", g)
	}
	for _, bad := range []string{"{attribute: x, independent: true}", "{}"} {
		_, err := Parse([]byte("drivers:\n  a.example.com: {identity: [uuid], units: " + bad + "}\n"))
		if err == nil || !strings.Contains(err.Error(), "drivers.a.example.com.units: give either attribute") {
			t.Fatalf("units %s: %v", bad, err)
		}
	}
}

func TestParseAndMatch(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		class, driver string
		wantName      string
		wantTolerance time.Duration
	}{
		{"gpu.example.com", "gpu.example.com", "a100", 10 * time.Minute},
		{"other", "nic.example.com", "nics", 2 * time.Minute},
		{"other", "other", "default", 2 * time.Minute},
	}
	for _, tt := range tests {
		p := s.For(tt.class, tt.driver)
		if p.Name != tt.wantName || p.ToleranceWindow.D() != tt.wantTolerance {
			t.Errorf("For(%s, %s) = %s/%s, want %s/%s", tt.class, tt.driver, p.Name, p.ToleranceWindow.D(), tt.wantName, tt.wantTolerance)
		}
	}
	if p := s.For("gpu.example.com", "x"); !p.ApprovalRequired || p.HeartbeatLimit != Default().HeartbeatLimit {
		t.Errorf("overrides not layered on the default: %+v", p)
	}
	p := s.For("", "nic.example.com")
	if p.TaintEffect != EffectNoExecute {
		t.Errorf("effect = %s", p.TaintEffect)
	}
	wantProbe := Check{Image: "diag:1", Command: []string{"diag", "--full"}, Timeout: JSONDuration(2 * time.Minute), Namespace: DefaultProbeNamespace}
	if !reflect.DeepEqual(p.Probe, wantProbe) || p.Canary.Namespace != "canaries" || p.Canary.Image != DefaultCheckImage ||
		p.SlackChannel != "#nics" || !reflect.DeepEqual(p.Identity, []string{"serial"}) {
		t.Errorf("probe/canary/identity not read: %+v", p)
	}
	if p := s.For("gpu.example.com", "gpu.example.com"); p.Identity != nil || p.Probe.Image != DefaultCheckImage {
		t.Errorf("a driver the file does not name has identity %v, probe %+v", p.Identity, p.Probe)
	}
	if p := s.WithIdentity("gpu.example.com", "node", "index").For("gpu.example.com", "gpu.example.com"); !reflect.DeepEqual(p.Identity, []string{"node", "index"}) {
		t.Errorf("WithIdentity: %v", p.Identity)
	}
	if p := s.WithIdentity("nic.example.com", "other").For("", "nic.example.com"); !reflect.DeepEqual(p.Identity, []string{"serial"}) {
		t.Errorf("WithIdentity overrode the file's identity: %v", p.Identity)
	}
}

// The shipped reset-domain examples load, and each says the domain its comment gives.
func TestShippedResetDomainExamples(t *testing.T) {
	for file, want := range map[string]struct{ driver, domain, holders string }{
		"nvswitch-baseboard.yaml": {"gpu.nvidia.com", DomainNode, HoldersMove},
		"mi300x-xgmi-hive.yaml":   {"gpu.amd.com", DomainNode, HoldersWait},
		"pcie.yaml":               {"gpu.nvidia.com", DomainDevice, HoldersWait},
	} {
		s, err := LoadFile("../../deploy/examples/reset-domains/" + file)
		if err != nil {
			t.Fatal(err)
		}
		p := s.For("", want.driver)
		if s.ResetDomain(want.driver) != want.domain || len(p.Repair.Steps) == 0 || p.Repair.Steps[0].Holders != want.holders {
			t.Errorf("%s: domain %q, steps %+v", file, s.ResetDomain(want.driver), p.Repair.Steps)
		}
	}
}
