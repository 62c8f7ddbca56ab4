package policy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRepairLadder(t *testing.T) {
	set, err := Parse([]byte(`
default: {}
drivers:
  gpu.example.com: {identity: [uuid]}
policies:
  - name: gpus
    match: {driver: gpu.example.com}
    repair:
      retireAfter: 3
      steps:
        - kind: reset
          attempts: 2
          image: registry.example.com/gpu-reset:1
          command: [gpu-reset, --device]
          timeout: 2m
`))
	if err != nil {
		t.Fatal(err)
	}
	if set.For("", "other.example.com").Repair.Enabled() || Default().Repair.Enabled() {
		t.Fatal("a policy without a ladder repairs")
	}
	r := set.For("", "gpu.example.com").Repair
	if !r.Enabled() || r.RetireAfter != 3 || len(r.Steps) != 1 {
		t.Fatalf("ladder %+v", r)
	}
	s := r.Steps[0]
	if s.Kind != RepairReset || s.Attempts != 2 || s.Check.Image != "registry.example.com/gpu-reset:1" ||
		!slices.Equal(s.Check.Command, []string{"gpu-reset", "--device"}) || s.Check.Timeout.D() != 2*time.Minute || s.Check.Namespace != DefaultResetNamespace {
		t.Fatalf("step %+v", s)
	}
}

// A broken ladder is refused with the line and the reason, and loads nothing.
func TestBadRepairLadders(t *testing.T) {
	for _, tt := range []struct{ ladder, want string }{
		{`steps: [{kind: reboot-everything, image: i, command: [c]}]`, `unknown kind "reboot-everything"`},
		{`steps: [{kind: reset, attempts: 0, image: i, command: [c]}]`, "attempts must be >= 1"},
		{`steps: [{kind: reset, command: [c]}]`, "needs an image and a command"},
		{`steps: [{kind: reset, image: i}]`, "needs an image and a command"},
		{`steps: [{kind: reset, image: i, command: [c], timeout: 0s}]`, "timeout must be positive"},
		{`retireAfter: -1`, "retireAfter must be from 0 to 20"},
		{`retireAfter: 21`, "retireAfter must be from 0 to 20 (a device keeps its 20 newest quarantines), got 21"},
		{`steps: [{kind: reset, image: i, command: [c], colour: red}]`, "colour"},
		{`steps: [{kind: reset, image: i, command: [c], holders: remediator}]`, `holders "remediator": a reset step's holders`},
		{`steps: [{kind: reset, image: i, command: [c], template: {apiVersion: v1, kind: K}}]`, "takes no template"},
		{`steps: [{kind: reset, image: i, command: [c], holders: move}]`, "enable migration or choose holders: wait"},
		{`steps: [{kind: node}]`, "needs a template"},
		{`steps: [{kind: node, template: {kind: Reboot}}]`, "needs apiVersion"},
		{`steps: [{kind: node, template: {apiVersion: v1}}]`, "needs kind"},
		{`steps: [{kind: node, template: {apiVersion: v1, kind: K, metadata: [a]}}]`, "metadata must be an object"},
		{`steps: [{kind: node, template: {apiVersion: v1, kind: K, spec: {n: "{{ .Nodes }}"}}}]`, "Nodes"},
		{`steps: [{kind: node, template: {apiVersion: v1, kind: K, spec: {n: "{{ .Node "}}}]`, "template"},
		{`steps: [{kind: node, image: i, template: {apiVersion: v1, kind: K}}]`, "runs no Pod"},
		{`steps: [{kind: node, notRunExitCodes: [3], template: {apiVersion: v1, kind: K}}]`, "runs no Pod"},
		{`steps: [{kind: reset, image: i, command: [c], notRunExitCodes: [x]}]`, `"x" is not an exit code`},
		{`steps: [{kind: node, holders: everyone, template: {apiVersion: v1, kind: K}}]`, `holders "everyone"`},
		{`steps: [{kind: node, holders: move, template: {apiVersion: v1, kind: K}}]`, "enable migration or choose holders: wait"},
	} {
		set, err := Parse([]byte("default:\n  repair: {" + tt.ladder + "}\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, %v; want an error with %q", tt.ladder, set, err, tt.want)
		}
	}
}

// A node step's template is kept as written and rendered for a device: every string may name the
// node, device, driver and pool.
func TestNodeStepTemplate(t *testing.T) {
	set, err := Parse([]byte(`
default:
  repair:
    steps:
      - {kind: reset, image: i, command: [c]}
      - kind: node
        timeout: 15m
        approval: true
        template:
          apiVersion: remediation.medik8s.io/v1alpha1
          kind: SelfNodeRemediation
          metadata: {name: "{{ .Node }}", namespace: medik8s, labels: {pool: "{{ .Pool }}"}}
          spec: {reasons: ["{{ .Driver }}/{{ .Device }} failed its reset"], replicas: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := set.For("", "gpu.example.com").Repair.Steps[1]
	if s.Kind != RepairNode || s.Attempts != 1 || s.Holders != HoldersWait || !s.Approval || set.For("", "gpu.example.com").Repair.Steps[0].Approval || s.Check.Timeout.D() != 15*time.Minute || s.Check.Namespace != "" {
		t.Fatalf("step %+v", s)
	}
	obj, err := s.Object(NodeVars{Node: "n-3", Device: "gpu-1", Driver: "gpu.example.com", Pool: "p"})
	if err != nil {
		t.Fatal(err)
	}
	md := obj["metadata"].(map[string]any)
	spec := obj["spec"].(map[string]any)
	if obj["kind"] != "SelfNodeRemediation" || md["name"] != "n-3" || md["namespace"] != "medik8s" ||
		md["labels"].(map[string]any)["pool"] != "p" || spec["reasons"].([]any)[0] != "gpu.example.com/gpu-1 failed its reset" || spec["replicas"] != float64(1) {
		t.Fatalf("object %v", obj)
	}
	// Rendering leaves the step's template as it was, for the next device.
	if again, _ := s.Object(NodeVars{Node: "n-4"}); again["metadata"].(map[string]any)["name"] != "n-4" {
		t.Fatalf("second object %v", again)
	}
	def := Default()
	def.Repair.Steps = []RepairStep{{Kind: RepairNode, Attempts: 1, Check: Check{Timeout: JSONDuration(time.Minute)}, Holders: HoldersWait}}
	if _, err := def.Repair.Steps[0].Object(NodeVars{}); err == nil || !strings.Contains(err.Error(), "needs a template") {
		t.Fatalf("a step without a template: %v", err)
	}
}

// A node step may move the node's other holders with the policy's migration.
func TestNodeStepMovesHolders(t *testing.T) {
	set, err := Parse([]byte(`
default:
  migration: {enabled: true}
  repair:
    steps:
      - {kind: node, holders: move, template: {apiVersion: v1, kind: K}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if r := set.For("", "gpu.example.com").Repair; !r.MovesHolders() || r.Steps[0].Holders != HoldersMove {
		t.Fatalf("ladder %+v", r)
	}
	if (Repair{Steps: []RepairStep{{Kind: RepairNode, Holders: HoldersWait}}}).MovesHolders() {
		t.Fatal("a waiting node step moves holders")
	}
}

// A check and a reset say which of their tool's exit codes mean it did not run; a policy says
// after how many not-runs in a row a person hears of it.
func TestNotRunExitCodes(t *testing.T) {
	set, err := Parse([]byte("default:\n  notRunAlertAfter: 5\n  notRunRetry: 10s\n  probe: {notRunExitCodes: [3]}\n  repair: {steps: [{kind: reset, image: i, command: [c], notRunExitCodes: [17, 3]}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := set.For("", "gpu.example.com")
	if p.NotRunAlertAfter != 5 || p.NotRunRetry.D() != 10*time.Second || !p.Probe.NotRunBy(3) || p.Probe.NotRunBy(1) || p.Canary.NotRunBy(3) {
		t.Fatalf("policy %+v", p)
	}
	if reset := p.Repair.Steps[0].Check; !reset.NotRunBy(17) || !reset.NotRunBy(3) || reset.NotRunBy(1) {
		t.Fatalf("reset %+v", reset)
	}
	if d := Default(); d.NotRunAlertAfter != DefaultNotRunAlertAfter || d.Probe.NotRunBy(1) {
		t.Fatalf("default %+v", d)
	}
}

// A driver says what one reset reaches; a reset step says whether the domain's other holders are
// waited for or moved. A domain the file does not name, or names wrongly, is refused.
func TestResetDomains(t *testing.T) {
	set, err := Parse([]byte(`drivers:
  gpu.nvidia.com: {identity: [uuid], resetDomain: "attribute:baseboard"}
  amd.com: {identity: [uuid], resetDomain: "attribute:hive"}
  npu.example.com: {identity: [uuid], resetDomain: node}
  nic.example.com: {identity: [mac]}
default:
  migration: {enabled: true}
  repair: {steps: [{kind: reset, image: i, command: [c], holders: move}, {kind: reset, image: i, command: [c]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for driver, want := range map[string]string{"gpu.nvidia.com": "attribute:baseboard", "amd.com": "attribute:hive", "npu.example.com": DomainNode, "nic.example.com": DomainDevice} {
		if got := set.ResetDomain(driver); got != want {
			t.Errorf("%s: %q, want %q", driver, got, want)
		}
	}
	if p := set.For("", "gpu.nvidia.com"); p.ResetDomain != "attribute:baseboard" || p.Repair.Steps[0].Holders != HoldersMove || p.Repair.Steps[1].Holders != HoldersWait {
		t.Fatalf("policy %+v", p)
	}
	if p := set.For("", "nic.example.com"); p.ResetDomain != "" {
		t.Fatalf("a driver with no domain: %q", p.ResetDomain)
	}
	for _, bad := range []string{"hive", "attribute:", "rack"} {
		_, err := Parse([]byte("drivers:\n  d: {identity: [uuid], resetDomain: \"" + bad + "\"}\n"))
		if err == nil || !strings.Contains(err.Error(), "drivers.d: resetDomain") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// Checked against what the driver publishes: a name none of its devices has is refused.
	published := map[string]Publishes{
		"gpu.nvidia.com": {"gpu-0": {"uuid", "gpu.nvidia.com/baseboard"}},
		"amd.com":        {"gpu-0": {"uuid", "partition"}},
	}
	err = set.CheckDomains(published)
	if err == nil || !strings.Contains(err.Error(), `drivers.amd.com.resetDomain "attribute:hive": none of the driver's 1 published devices has attribute "hive"`) {
		t.Fatalf("a domain attribute amd.com does not publish: %v", err)
	}
	published["amd.com"]["gpu-0"] = append(published["amd.com"]["gpu-0"], "hive")
	if err := set.CheckDomains(published); err != nil {
		t.Fatal(err)
	}
	delete(published, "amd.com")
	if err := set.CheckDomains(published); err != nil {
		t.Fatalf("a driver that publishes nothing yet is not judged: %v", err)
	}
}
