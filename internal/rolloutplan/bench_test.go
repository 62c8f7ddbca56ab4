package rolloutplan

import (
	"fmt"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// fleetSnapshot is a phase of nodes x devices shared devices (40 GiB, smallest request 4 GiB) and
// claims spread over them, each taking 4-12 GiB of one device; a tenth wait for allocation and
// one in fifty Pods is Pending.
func fleetSnapshot(nodes, devices, claims int) (Plan, Snapshot) {
	const gi = int64(1 << 30)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := Snapshot{Now: now}
	for n := 0; n < nodes; n++ {
		name := fmt.Sprintf("node-%d", n)
		s.Nodes = append(s.Nodes, Node{Name: name, Owner: "dra", Expected: int64(devices)})
		for d := 0; d < devices; d++ {
			s.Devices = append(s.Devices, Device{Node: name, Driver: "drv", Pool: name, Name: fmt.Sprintf("gpu-%d", d), Shared: true,
				Capacity: map[string]Capacity{"memory": {Value: 40 * gi, Smallest: 4 * gi}}})
		}
	}
	for i := 0; i < claims; i++ {
		created := now.Add(-time.Duration(i%600) * time.Second)
		if i%10 == 0 {
			created = now.Add(-3 * time.Second) // waiting for allocation, recently made
		}
		c := Claim{Namespace: fmt.Sprintf("team-%d", i%20), Name: fmt.Sprintf("claim-%d", i), Classes: []string{"gpu"}, Created: created}
		if i%10 != 0 {
			alloc := created.Add(time.Duration(1+i%7) * time.Second)
			ready := alloc.Add(time.Duration(2+i%5) * time.Second)
			node := i % nodes
			c.AllocatedAt, c.ReadyAt = &alloc, &ready
			c.Results = []Result{{Driver: "drv", Pool: fmt.Sprintf("node-%d", node), Device: fmt.Sprintf("gpu-%d", (i/nodes)%devices),
				Consumed: map[string]int64{"memory": int64(4+4*(i%3)) * gi}}}
		}
		s.Claims = append(s.Claims, c)
		if i%50 == 0 {
			s.Pending = append(s.Pending, PendingPod{Namespace: c.Namespace, Name: c.Name, Reason: "Unschedulable", Message: "0/1000 nodes are available: cannot allocate all claims"})
		}
	}
	var ns []string
	for i := 0; i < 20; i++ {
		ns = append(ns, fmt.Sprintf("team-%d", i))
	}
	frag, drift, cross := 0.5, 0, 0
	p := Plan{Name: "fleet", OwnerLabel: DefaultOwnerLabel, Plugin: "plugin", DRA: "dra", Phases: []Phase{{Name: "all", Nodes: "pool=all",
		Classes: []Class{{Name: "gpu", Driver: "drv"}}, Namespaces: ns, Gates: Gates{MinClaims: 1,
			ClaimToAllocated:   &Latency{P99: policy.JSONDuration(10 * time.Second)},
			AllocatedToReady:   &Latency{P99: policy.JSONDuration(10 * time.Second)},
			AllocationFailures: &FailureLimits{Retryable: 1000}, MaxFragmentation: &frag, MaxDrift: &drift, MaxCrossNamespace: &cross}}}}
	return p, s
}

// BenchmarkEvaluateFleet: every gate over 1,000 nodes x 8 devices and 10,000 claims.
func BenchmarkEvaluateFleet(b *testing.B) {
	p, s := fleetSnapshot(1000, 8, 10000)
	since := s.Now.Add(-time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r := Evaluate(p, 0, since, s, nil)
		if r.Claims != 10000 || !r.Passed() {
			b.Fatalf("claims %d failed %v", r.Claims, r.Failed)
		}
	}
}

// BenchmarkPreflightFleet: the double-ownership check over 1,000 nodes x 8 devices.
func BenchmarkPreflightFleet(b *testing.B) {
	p, s := fleetSnapshot(1000, 8, 0)
	b.ReportAllocs()
	for b.Loop() {
		if v := Preflight(p, 0, s); len(v) != 0 {
			b.Fatal(v)
		}
	}
}
