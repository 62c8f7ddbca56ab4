package watcher

import (
	"fmt"
	"testing"

	"github.com/devicewarden/devicewarden/internal/device"
)

// BenchmarkResolve measures turning one pod's status into device reports.
func BenchmarkResolve(b *testing.B) {
	pod := podWith(healthEntry("claim:gpu", "k8s.gpu.sim.devicewarden.io/gpu=node-1-gpu-3", "Unhealthy", nil))
	claim := compactClaim(claimWith("pod-gpu-abc", result("gpus", "gpu-3")), nil)
	get := func(string, string) (*Claim, bool) { return claim, true }
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := Resolve(pod, get, nil); len(r) != 1 {
			b.Fatal("not resolved")
		}
	}
}

// BenchmarkStoreUpdate measures one pod update through aggregation and the signal decision.
func BenchmarkStoreUpdate(b *testing.B) {
	s := newStore()
	reports := make([][]Report, 1000)
	for i := range reports {
		reports[i] = []Report{rep(fmt.Sprintf("gpu-%d", i), device.Unknown, fmt.Sprintf("p%d", i))}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % len(reports)
		ids := s.setPod(fmt.Sprintf("ns/p%d", k), "7", reports[k], nil, nil)
		s.next(ids[0], benchNow, 0)
		i++
	}
}
