package watcher

import (
	"fmt"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/internal/device"
)

// A claim's compact form gives back every allocation result as written, in order, and claims of
// the same pool and request share one (request, driver, pool) value.
func TestCompactClaimKeepsEveryResult(t *testing.T) {
	var in interner
	a := compactClaim(claimWith("a", result("gpus", "gpu-0"), result("gpus", "gpu-1"),
		resourcev1.DeviceRequestAllocationResult{Request: "nic/fast", Driver: "nic.example.com", Pool: "node-2", Device: "eth-0"}), &in)
	b := compactClaim(claimWith("b", result("gpus", "gpu-2")), &in)
	want := []AllocatedDevice{
		{Request: "gpus", Driver: drv, Pool: "node-1", Device: "gpu-0"},
		{Request: "gpus", Driver: drv, Pool: "node-1", Device: "gpu-1"},
		{Request: "nic/fast", Driver: "nic.example.com", Pool: "node-2", Device: "eth-0"},
	}
	if got := slices.Collect(a.Results()); !slices.Equal(got, want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	var first []AllocatedDevice
	for r := range a.Results() {
		first = append(first, r)
		break
	}
	if len(first) != 1 {
		t.Fatalf("stopping after one result yielded %v", first)
	}
	if a.results[0].at != a.results[1].at || a.results[0].at != b.results[0].at || a.results[0].at == a.results[2].at {
		t.Fatal("claims of one pool and request do not share their triple, or different ones do")
	}
	for _, id := range []device.ID{{Driver: drv, Pool: "node-1", Device: "gpu-1"}, {Driver: "nic.example.com", Pool: "node-2", Device: "eth-0"}} {
		if !a.holds(id) {
			t.Errorf("claim a does not hold %v", id)
		}
	}
	for _, id := range []device.ID{{Driver: drv, Pool: "node-1", Device: "gpu-2"}, {Driver: drv, Pool: "node-2", Device: "gpu-0"},
		{Driver: "other", Pool: "node-1", Device: "gpu-0"}} {
		if a.holds(id) {
			t.Errorf("claim a holds %v", id)
		}
	}
}

// A result serves the whole claim (""), its own request, or its subrequests; never a request whose
// name merely starts the same way.
func TestForRequest(t *testing.T) {
	for _, tc := range []struct {
		result, request string
		want            bool
	}{
		{"gpus", "", true}, {"gpus", "gpus", true}, {"gpus/fast", "gpus", true},
		{"gpus2", "gpus", false}, {"gpus2/fast", "gpus", false}, {"gpu", "gpus", false}, {"nics/fast", "gpus", false},
	} {
		if got := forRequest(tc.result, tc.request); got != tc.want {
			t.Errorf("forRequest(%q, %q) = %v", tc.result, tc.request, got)
		}
	}
}

// With node and claim churn the interner does not grow for ever: names of claims and nodes that
// are gone are dropped once it has doubled, and a live claim's names stay shared.
func TestInternerForgetsWhatNoClaimUses(t *testing.T) {
	x := newClaimIndex()
	claim := func(i int) *resourcev1.ResourceClaim {
		c := claimWith(fmt.Sprintf("c-%d", i), resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: drv,
			Pool: fmt.Sprintf("node-%d", i), Device: fmt.Sprintf("gpu-%d", i)})
		c.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}
		return c
	}
	_, live := x.put(claim(-1)) // stays throughout
	for i := range 100_000 {
		x.put(claim(i))
		x.delete(claim(i))
	}
	if n := x.intern.size(); n > 2*2*minSweep {
		t.Fatalf("interner holds %d names and triples after 100,000 claims came and went, want at most %d", n, 4*minSweep)
	}
	_, again := x.put(claim(-1))
	if live.results[0].at != again.results[0].at {
		t.Fatal("the live claim's triple is no longer shared after a sweep")
	}
}
