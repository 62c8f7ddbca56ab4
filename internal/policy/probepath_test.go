package policy

import (
	"strings"
	"testing"
	"time"
)

const pathsFile = `policies:
  - name: gpus
    match: {deviceClass: gpu}
    probe: {namespace: diag, timeout: 7m}
    probeAfter:
      reset: {image: dcgm:4, command: [dcgmi, diag, -r, "2"]}
      node: {image: dcgm:4, command: [dcgmi, diag, -r, "3"], timeout: 45m}
`

// Each path's probe keeps the policy probe's namespace, and its timeout unless it names one; a
// path the file does not name, and no step at all, probe with the plain probe.
func TestProbeAfterByPath(t *testing.T) {
	set, err := Parse([]byte(pathsFile))
	if err != nil {
		t.Fatal(err)
	}
	p := set.For("gpu", "")
	reset, node := p.ProbeFor(RepairReset), p.ProbeFor(RepairNode)
	if reset.Image != "dcgm:4" || strings.Join(reset.Command, " ") != "dcgmi diag -r 2" || reset.Namespace != "diag" || reset.Timeout.D() != 7*time.Minute {
		t.Fatalf("after a reset: %+v", reset)
	}
	if strings.Join(node.Command, " ") != "dcgmi diag -r 3" || node.Timeout.D() != 45*time.Minute || node.Namespace != "diag" {
		t.Fatalf("after a node step: %+v", node)
	}
	if plain := p.ProbeFor(""); plain.Image != DefaultCheckImage || plain.Namespace != "diag" {
		t.Fatalf("after no step: %+v", plain)
	}
	if d := set.For("other", "").ProbeFor(RepairReset); d.Image != DefaultCheckImage {
		t.Fatalf("a policy without paths probes with its probe: %+v", d)
	}
	// JSON (the workflow's snapshot) carries them.
	one := Policy{Probe: Check{Image: "p"}}
	if one.ProbeFor(RepairReset).Image != "p" {
		t.Fatal("no paths: the probe")
	}
}

// A path the ladder has no step kind for, a path's probe without its own image or command, and
// one with a timeout that is not positive are refused at load, each saying which.
func TestProbeAfterRefusesBadPaths(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"probeAfter:\n      reboot: {image: x, command: [y]}", `probeAfter.reboot: not a repair step kind`},
		{"probeAfter:\n      reset: {command: [dcgmi, diag]}", `probeAfter.reset: a probe by path needs its own image and command`},
		{"probeAfter:\n      reset: {image: dcgm:4}", `probeAfter.reset: a probe by path needs its own image and command`},
		{"probeAfter:\n      node: {image: \"\", command: [x]}", `probeAfter.node: a probe by path needs its own image and command`},
		{"probeAfter:\n      node:", `probeAfter.node: a probe by path needs its own image and command`},
		{"probeAfter:\n      reset: {image: x, command: [y], timeout: 0s}", `probeAfter.reset.timeout must be positive`},
		{"probeAfter: [reset]", `cannot unmarshal`},
	} {
		_, err := Parse([]byte("policies:\n  - name: p\n    match: {deviceClass: gpu}\n    " + c.body + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.body, err, c.want)
		}
	}
}

// A snapshot handed in whole (JSON) is checked the same way.
func TestValidateChecksProbesByPath(t *testing.T) {
	p := Default()
	p.ProbeAfter = map[RepairKind]Check{RepairReset: {Image: "x", Command: []string{"y"}, Namespace: "n", Timeout: JSONDuration(time.Minute)}}
	if err := p.Validate(); err != nil {
		t.Fatalf("a good path refused: %v", err)
	}
	for kind, c := range map[RepairKind]Check{
		"reboot":    {Image: "x", Command: []string{"y"}, Namespace: "n", Timeout: JSONDuration(time.Minute)},
		RepairReset: {Image: "x", Namespace: "n", Timeout: JSONDuration(time.Minute)},
		RepairNode:  {Image: "x", Command: []string{"y"}, Timeout: JSONDuration(time.Minute)},
	} {
		p.ProbeAfter = map[RepairKind]Check{kind: c}
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "probeAfter."+string(kind)) {
			t.Errorf("%s %+v: got %v", kind, c, err)
		}
	}
	p.ProbeAfter = map[RepairKind]Check{RepairNode: {Image: "x", Command: []string{"y"}, Namespace: "n"}}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "probeAfter.node.timeout") {
		t.Errorf("no timeout: %v", err)
	}
}
