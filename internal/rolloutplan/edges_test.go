package rolloutplan

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// TestGatesAtTheirThresholds: a figure equal to its threshold passes; one past it fails.
func TestGatesAtTheirThresholds(t *testing.T) {
	p := plan()
	p.Phases[0].Gates = Gates{MaxDrift: intp(1), MaxCrossNamespace: intp(1),
		ClaimToAllocated: &Latency{P50: policy.JSONDuration(2 * time.Second), P99: policy.JSONDuration(2 * time.Second)}}
	s := Snapshot{Now: t0.Add(time.Minute),
		Nodes:   []Node{{Name: "n", Owner: "dra", Expected: 2}},
		Devices: []Device{{Node: "n", Driver: "drv", Pool: "n", Name: "g0"}},
		Claims: []Claim{claim("canary", "a", 0, at(2), at(3), "g0"),
			{Namespace: "team", Name: "b", Results: []Result{{Driver: "drv", Pool: "n", Device: "g0"}}}},
	}
	s.Claims[0].Results[0].Pool = "n"
	r := Evaluate(p, 0, t0, s, nil)
	if len(r.Drift) != 1 || len(r.CrossNamespace) != 1 || r.ClaimToAllocated.P50.D() != 2*time.Second {
		t.Fatalf("report = %+v", r)
	}
	if !r.Passed() {
		t.Errorf("figures equal to their thresholds failed: %v", r.Failed)
	}
	p.Phases[0].Gates.MaxDrift, p.Phases[0].Gates.MaxCrossNamespace = intp(0), intp(0)
	p.Phases[0].Gates.ClaimToAllocated = &Latency{P50: policy.JSONDuration(time.Second), P99: policy.JSONDuration(time.Second)}
	if r := Evaluate(p, 0, t0, s, nil); len(r.Failed) != 4 {
		t.Errorf("failed = %q, want drift, tenants, p50 and p99", r.Failed)
	}
}

// TestFragmentationEdges: free exactly the smallest request is usable; full devices add nothing
// (no 0/0 fraction).
func TestFragmentationEdges(t *testing.T) {
	dev := func(name string) Device {
		return Device{Node: "n", Driver: "drv", Pool: "n", Name: name, Shared: true, Capacity: map[string]Capacity{"memory": {Value: 40, Smallest: 10}}}
	}
	use := func(d string, v int64) Claim {
		return Claim{Results: []Result{{Driver: "drv", Pool: "n", Device: d, Consumed: map[string]int64{"memory": v}}}}
	}
	s := Snapshot{Now: t0, Devices: []Device{dev("a"), dev("b")}, Claims: []Claim{use("a", 40), use("b", 40)}}
	if r := Evaluate(plan(), 0, t0, s, nil); len(r.Fragmentation) != 0 {
		t.Errorf("full devices: %+v", r.Fragmentation)
	}
	s.Claims[1] = use("b", 30) // 10 free, exactly the smallest request
	r := Evaluate(plan(), 0, t0, s, nil)
	if len(r.Fragmentation) != 1 || r.Fragmentation[0].Free != 10 || r.Fragmentation[0].Fragmented != 0 {
		t.Errorf("fragmentation = %+v", r.Fragmentation)
	}
}

func TestParseBoundaries(t *testing.T) {
	const head = "name: r\npluginResource: x.io/gpu\nownerLabel: example.com/gpu-driver\nphases:\n"
	const phase = "  - name: a\n    nodes: pool=a\n    classes: [{name: c, driver: d}]\n    namespaces: [t]\n    soak: 1m\n"
	p, err := Parse([]byte(head + phase + "    gates: {allocationFailures: {retryable: 0, nonRetryable: 0, needsCleanup: 0}, maxFragmentation: 0, maxDrift: 0, maxCrossNamespace: 0, minClaims: 0}\n"))
	if err != nil {
		t.Fatalf("zero limits refused: %v", err)
	}
	if p.OwnerLabel != "example.com/gpu-driver" {
		t.Errorf("ownerLabel = %q, want the plan's", p.OwnerLabel)
	}
	if _, err := Parse([]byte(head + phase + "    gates: {maxFragmentation: 1}\n")); err != nil {
		t.Errorf("maxFragmentation 1 refused: %v", err)
	}
	for _, bad := range []string{"rollbackHold: 0s\n", "rollbackHold: -1h\n"} {
		if _, err := Parse([]byte(bad + head + phase)); err == nil || !strings.Contains(err.Error(), "rollbackHold") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := Parse([]byte(head + phase + "    gates: {claimToAllocated: {p50: 0s, p99: 5s}}\n")); err == nil || !strings.Contains(err.Error(), `p50 "0s"`) {
		t.Errorf("zero p50: %v", err)
	}
	if _, err := Parse([]byte(head + strings.Replace(phase, "soak: 1m", "soak: -1m", 1))); err == nil {
		t.Errorf("negative soak accepted")
	}
	if ns := p.AllowedNamespaces(5); len(ns) != 1 || !ns["t"] {
		t.Errorf("allowed namespaces past the last phase = %v", ns)
	}
}

// TestLatencyGateChecksOnlyWhatItSets: a gate with only p50 never fails on p99, and the other way.
func TestLatencyGateChecksOnlyWhatItSets(t *testing.T) {
	st := Stage{P50: policy.JSONDuration(time.Second), P99: policy.JSONDuration(time.Hour)}
	if f := (&Latency{P50: policy.JSONDuration(time.Second)}).check("x", st); len(f) != 0 {
		t.Errorf("p50-only gate: %v", f)
	}
	st = Stage{P50: policy.JSONDuration(time.Hour), P99: policy.JSONDuration(time.Second)}
	if f := (&Latency{P99: policy.JSONDuration(time.Second)}).check("x", st); len(f) != 0 {
		t.Errorf("p99-only gate: %v", f)
	}
}

func TestFragmentationSortedByCapacity(t *testing.T) {
	d := Device{Node: "n", Driver: "drv", Pool: "n", Name: "g", Shared: true,
		Capacity: map[string]Capacity{"memory": {Value: 10}, "bandwidth": {Value: 10}, "cores": {Value: 10}}}
	r := Evaluate(plan(), 0, t0, Snapshot{Now: t0, Devices: []Device{d}}, nil)
	var names []string
	for _, f := range r.Fragmentation {
		names = append(names, f.Capacity)
	}
	if strings.Join(names, ",") != "bandwidth,cores,memory" {
		t.Errorf("order = %v", names)
	}
}

func TestCapacityGate(t *testing.T) {
	p := plan()
	p.Phases[0].Gates.MaxCapacityViolations = intp(0)
	s := Snapshot{Now: t0, CapacityViolations: []string{"oversold: claim t/a share - on drv/n/g0: memory: shares take 44Gi of 40Gi"}}
	r := Evaluate(p, 0, t0, s, nil)
	if len(r.CapacityViolations) != 1 || strings.Join(r.Failed, "|") != "capacity invariant violations: 1, the gate allows 0" {
		t.Errorf("report = %+v", r)
	}
	p.Phases[0].Gates.MaxCapacityViolations = intp(1)
	if r := Evaluate(p, 0, t0, s, nil); !r.Passed() {
		t.Errorf("at the threshold: %v", r.Failed)
	}
	if _, err := Parse([]byte("name: r\npluginResource: x\nphases:\n  - name: a\n    nodes: pool=a\n    classes: [{name: c, driver: d}]\n    namespaces: [t]\n    soak: 1m\n    gates: {maxCapacityViolations: -1}\n")); err == nil || !strings.Contains(err.Error(), "maxCapacityViolations -1") {
		t.Errorf("negative cap: %v", err)
	}
}
