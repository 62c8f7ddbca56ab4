package rolloutplan

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }

func intp(v int) *int { return &v }

func floatp(v float64) *float64 { return &v }

func plan() Plan {
	return Plan{Name: "r", OwnerLabel: DefaultOwnerLabel, Plugin: "plugin", DRA: "dra", PluginResource: "x.io/gpu",
		Phases: []Phase{
			{Name: "one", Nodes: "pool=a", Classes: []Class{{Name: "gpu", Driver: "drv"}}, Namespaces: []string{"canary"}},
			{Name: "two", Nodes: "pool=b", Classes: []Class{{Name: "gpu", Driver: "drv"}}, Namespaces: []string{"team"}},
		}}
}

func claim(ns, name string, created int, alloc, ready *time.Time, dev string) Claim {
	c := Claim{Namespace: ns, Name: name, Classes: []string{"gpu"}, Created: t0.Add(time.Duration(created) * time.Second),
		AllocatedAt: alloc, ReadyAt: ready}
	if dev != "" {
		c.Results = []Result{{Driver: "drv", Pool: "n1", Device: dev}}
	}
	return c
}

func TestEvaluateLatencies(t *testing.T) {
	s := Snapshot{Now: t0.Add(100 * time.Second),
		Claims: []Claim{
			claim("canary", "a", 0, at(2), at(3), "g0"),
			claim("canary", "b", 10, at(14), at(20), "g1"),
			claim("canary", "c", 20, at(21), nil, "g2"), // allocated 79 s ago, not Ready
			claim("canary", "d", 90, nil, nil, ""),      // waiting 10 s
			claim("canary", "old", -5, at(1), at(2), "g3"),
			{Namespace: "canary", Name: "other", Classes: []string{"nic"}, Created: t0, AllocatedAt: at(50)},
		}}
	r := Evaluate(plan(), 0, t0, s, nil)
	if r.Claims != 4 {
		t.Fatalf("claims = %d, want 4 (created since enable, of the phase's classes)", r.Claims)
	}
	// claim->allocated: 2, 4, 1, and 10 (still waiting): p50 = 2 s, p99 = 10 s.
	if got := r.ClaimToAllocated; got.Count != 3 || got.Waiting != 1 || got.P50.D() != 2*time.Second || got.P99.D() != 10*time.Second {
		t.Errorf("claim->allocated = %+v", got)
	}
	// allocated->ready: 1, 6, and 79 (waiting): p50 = 6 s, p99 = 79 s.
	if got := r.AllocatedToReady; got.Count != 2 || got.Waiting != 1 || got.P50.D() != 6*time.Second || got.P99.D() != 79*time.Second {
		t.Errorf("allocated->ready = %+v", got)
	}
	if !r.Passed() {
		t.Errorf("no gates set, yet failed: %v", r.Failed)
	}
	ph := plan()
	ph.Phases[0].Gates = Gates{MinClaims: 5,
		ClaimToAllocated: &Latency{P50: policy.JSONDuration(time.Second), P99: policy.JSONDuration(10 * time.Second)},
		AllocatedToReady: &Latency{P99: policy.JSONDuration(time.Minute)}}
	r = Evaluate(ph, 0, t0, s, nil)
	want := []string{"claims: 4 created during the soak, the gate needs 5", "claim->allocated p50: 2s, the gate allows 1s", "allocated->ready p99: 1m19s, the gate allows 1m0s"}
	if strings.Join(r.Failed, "|") != strings.Join(want, "|") {
		t.Errorf("failed = %q\nwant %q", r.Failed, want)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(i+1) * time.Second
	}
	for _, c := range []struct {
		pct  int
		want time.Duration
	}{{50, 50 * time.Second}, {99, 99 * time.Second}, {100, 100 * time.Second}, {1, time.Second}, {0, time.Second}} {
		if got := percentile(ds, c.pct); got != c.want {
			t.Errorf("p%d = %s, want %s", c.pct, got, c.want)
		}
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("one sample: %s", got)
	}
}

func TestClassify(t *testing.T) {
	for msg, want := range map[string]string{
		"0/3 nodes are available: 3 cannot allocate all claims.":             FailureRetryable,
		"resourceclaim \"x\" not found":                                      FailureNonRetryable,
		"deviceclass.resource.k8s.io \"gpu\" not found":                      FailureNonRetryable,
		"resourceclaim spec invalid: capacity request exceeds policy":        FailureNonRetryable,
		"resourceclaim \"x\" is being deleted":                               FailureNeedsCleanup,
		"resourceclaim in use by another pod, reserved for another consumer": FailureNeedsCleanup,
		"": FailureRetryable,
		"0/1 nodes are available: 1 node(s) did not have enough free capacity.":   FailureRetryable,
		"waiting for resourceclaim allocation: admission webhook forbidden: nope": FailureNonRetryable,
	} {
		if got := Classify(msg); got != want {
			t.Errorf("Classify(%q) = %s, want %s", msg, got, want)
		}
	}
}

func TestEvaluateFailures(t *testing.T) {
	p := plan()
	p.Phases[0].Gates.AllocationFailures = &FailureLimits{Retryable: 1}
	s := Snapshot{Now: t0,
		Pending: []PendingPod{
			{Namespace: "canary", Name: "p1", Reason: "Unschedulable", Message: "cannot allocate all claims"},
			{Namespace: "canary", Name: "p2", Reason: "Unschedulable", Message: "deviceclass \"gpu\" not found"},
			{Namespace: "elsewhere", Name: "p3", Reason: "Unschedulable", Message: "not found"},
		},
		Claims: []Claim{{Namespace: "canary", Name: "leaked", Classes: []string{"gpu"}, Created: t0.Add(-time.Hour), AllocatedAt: at(-3000), Orphaned: true},
			{Namespace: "elsewhere", Name: "leaked", Orphaned: true}},
	}
	r := Evaluate(p, 0, t0, s, nil)
	n := FailureCounts(r.Failures)
	if n[FailureRetryable] != 1 || n[FailureNonRetryable] != 1 || n[FailureNeedsCleanup] != 1 || len(r.Failures) != 3 {
		t.Fatalf("failures = %+v", r.Failures)
	}
	want := []string{"allocation failures (non-retryable): 1, the gate allows 0", "allocation failures (needs-cleanup): 1, the gate allows 0"}
	if strings.Join(r.Failed, "|") != strings.Join(want, "|") {
		t.Errorf("failed = %q", r.Failed)
	}
}

func TestEvaluateFragmentation(t *testing.T) {
	p := plan()
	p.Phases[0].Gates.MaxFragmentation = floatp(0.2)
	gi := int64(1 << 30)
	dev := func(name string) Device {
		return Device{Node: "n1", Driver: "drv", Pool: "n1", Name: name, Shared: true,
			Capacity: map[string]Capacity{"memory": {Value: 40 * gi, Smallest: 10 * gi}}}
	}
	use := func(dev string, g int64) Claim {
		return Claim{Namespace: "canary", Name: dev, Results: []Result{{Driver: "drv", Pool: "n1", Device: dev, Consumed: map[string]int64{"memory": g * gi}}}}
	}
	s := Snapshot{Now: t0,
		Devices: []Device{dev("g0"), dev("g1"), dev("g2"), {Node: "n1", Driver: "drv", Pool: "n1", Name: "whole"}},
		// g0: 5 GiB free (under the 10 GiB smallest request); g1: 20 free; g2: full.
		Claims: []Claim{use("g0", 35), use("g1", 20), use("g2", 30), use("g2", 10), use("whole", 0)},
	}
	r := Evaluate(p, 0, t0, s, nil)
	if len(r.Fragmentation) != 1 {
		t.Fatalf("fragmentation = %+v", r.Fragmentation)
	}
	f := r.Fragmentation[0]
	if f.Free != 25*gi || f.Fragmented != 5*gi || f.Fraction != 0.2 {
		t.Errorf("fragmentation = %+v, want 5 of 25 GiB", f)
	}
	if !r.Passed() {
		t.Errorf("0.2 is within 0.2: %v", r.Failed)
	}
	s.Claims[1] = use("g1", 31) // 9 free on g1: 14 of 14 fragmented
	r = Evaluate(p, 0, t0, s, nil)
	if r.Fragmentation[0].Fraction != 1 || r.Passed() {
		t.Errorf("fragmentation = %+v, failed %v", r.Fragmentation, r.Failed)
	}
}

func TestEvaluateDriftAndTenants(t *testing.T) {
	p := plan()
	p.Phases[0].Gates.MaxDrift = intp(0)
	p.Phases[0].Gates.MaxCrossNamespace = intp(0)
	devs := func(node string, n int) []Device {
		var out []Device
		for i := 0; i < n; i++ {
			out = append(out, Device{Node: node, Driver: "drv", Pool: node, Name: "g" + string(rune('0'+i))})
		}
		return out
	}
	s := Snapshot{Now: t0,
		Nodes: []Node{
			{Name: "ok", Owner: "dra", Expected: 2},
			{Name: "short", Owner: "dra", Expected: 2},
			{Name: "unknown", Owner: "dra", Expected: -1},
			{Name: "unlabelled", Owner: "plugin", Expected: 2},
			{Name: "both", Owner: "dra", PluginDevices: 2, Expected: 2},
			{Name: "quiet", Owner: "plugin", PluginDevices: 2, Expected: 2},
		},
		Claims: []Claim{
			{Namespace: "canary", Name: "mine", Results: []Result{{Driver: "drv", Pool: "ok", Device: "g0"}}},
			{Namespace: "team", Name: "early", Results: []Result{{Driver: "drv", Pool: "ok", Device: "g1"}}},
			{Namespace: "team", Name: "elsewhere", Results: []Result{{Driver: "drv", Pool: "far", Device: "g1"}}},
		},
	}
	for _, n := range []struct {
		node  string
		count int
	}{{"ok", 2}, {"short", 1}, {"unknown", 3}, {"unlabelled", 2}, {"both", 2}} {
		s.Devices = append(s.Devices, devs(n.node, n.count)...)
	}
	r := Evaluate(p, 0, t0, s, nil)
	want := []string{
		"short: DRA slices publish 1 devices, the node had 2",
		"unlabelled: DRA slices publish 2 devices but the node is not labelled devicewarden.io/device-owner=dra",
		"both: the plugin advertises 2 and DRA slices publish 2 devices",
	}
	if strings.Join(r.Drift, "|") != strings.Join(want, "|") {
		t.Errorf("drift = %q", r.Drift)
	}
	if len(r.CrossNamespace) != 1 || r.CrossNamespace[0] != "team/early uses drv/ok/g1" {
		t.Errorf("cross-namespace = %q", r.CrossNamespace)
	}
	if len(r.Failed) != 2 {
		t.Errorf("failed = %q", r.Failed)
	}
	// In phase two, team is an allowed tenant.
	if r := Evaluate(p, 1, t0, s, nil); len(r.CrossNamespace) != 0 {
		t.Errorf("phase two cross-namespace = %q", r.CrossNamespace)
	}
}

func TestEvaluateQueries(t *testing.T) {
	p := plan()
	p.Phases[0].Gates.Queries = []PromQueryGate{{Name: "errors", Query: "e", Max: floatp(0.05)}, {Name: "rps", Query: "r", Min: floatp(10)}, {Name: "lost", Query: "l", Max: floatp(1)}}
	r := Evaluate(p, 0, t0, Snapshot{Now: t0}, []QueryResult{{Name: "errors", Value: 0.05}, {Name: "rps", Value: 10}, {Name: "lost", Error: "connection refused"}})
	if strings.Join(r.Failed, "|") != "query lost: connection refused" {
		t.Errorf("failed = %q", r.Failed)
	}
	r = Evaluate(p, 0, t0, Snapshot{Now: t0}, []QueryResult{{Name: "errors", Value: 0.06}, {Name: "rps", Value: 9}})
	want := "query errors: 0.06, the gate allows at most 0.05|query rps: 9, the gate needs at least 10|query lost: no answer"
	if strings.Join(r.Failed, "|") != want {
		t.Errorf("failed = %q", r.Failed)
	}
}

func TestPreflight(t *testing.T) {
	p := plan()
	if v := Preflight(p, 0, Snapshot{}); len(v) != 1 || !strings.Contains(v[0].Reason, "matches no node") {
		t.Errorf("no nodes: %+v", v)
	}
	s := Snapshot{
		Nodes:   []Node{{Name: "clean", PluginDevices: 4}, {Name: "moved", Owner: "dra"}, {Name: "double", PluginDevices: 4}},
		Devices: []Device{{Node: "moved", Name: "g0"}, {Node: "double", Name: "g0"}, {Node: "double", Name: "g1"}},
	}
	v := Preflight(p, 0, s)
	if len(v) != 1 || v[0].Node != "double" || v[0].Reason != "double ownership: the device plugin advertises 4 x.io/gpu and DRA slices publish 2 devices" {
		t.Errorf("violations = %+v", v)
	}
}
