package watcher

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/device"
)

// The claims each device is held by are kept as claims come, change their allocation, go, and
// are swept by a relist: over generated sequences the index answers what a scan of every claim
// answers (holders, a holder, the class).
func TestClaimIndexAnswersAsAScan(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		x := newClaimIndex()
		devs := make([]device.ID, 4)
		for i := range devs {
			devs[i] = device.ID{Driver: drv, Pool: "node-1", Device: fmt.Sprint("gpu-", i)}
		}
		claim := func(name string, on []int) *resourcev1.ResourceClaim {
			var results []resourcev1.DeviceRequestAllocationResult
			for _, i := range on {
				results = append(results, resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: drv, Pool: "node-1", Device: devs[i].Device})
			}
			c := claimWith(name, results...)
			c.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "class-" + name}}}
			return c
		}
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			name := fmt.Sprint("c", rapid.IntRange(0, 4).Draw(rt, "claim"))
			switch rapid.IntRange(0, 3).Draw(rt, "step") {
			case 0, 1: // a claim is allocated, or allocated again elsewhere
				on := rapid.SliceOfNDistinct(rapid.IntRange(0, 3), 0, 2, rapid.ID[int]).Draw(rt, "on")
				x.put(claim(name, on))
			case 2:
				x.delete(claim(name, nil))
			case 3: // a relist that no longer finds some claims
				x.relistBegin()
				for _, key := range slices.Sorted(maps.Keys(x.claims)) {
					if rapid.Bool().Draw(rt, "kept "+key) {
						x.seen[key] = struct{}{}
					}
				}
				x.relistEnd()
			}
			for _, id := range devs {
				var scan []string
				class := ""
				for key, c := range x.claims {
					if c.holds(id) {
						scan = append(scan, key)
					}
				}
				slices.Sort(scan)
				if len(scan) > 0 {
					class = x.claims[scan[0]].class("gpus")
				}
				if got := x.holdingAny([]device.ID{id}); !slices.Equal(got, scan) {
					rt.Fatalf("%s held by %v, a scan says %v", id.Device, got, scan)
				}
				if got := x.holding(id); len(scan) == 0 && got != "" || len(scan) > 0 && got != scan[0] {
					rt.Fatalf("%s: holding %q, a scan says %v", id.Device, got, scan)
				}
				if got := x.classOf(id); got != class {
					rt.Fatalf("%s: class %q, a scan says %q", id.Device, got, class)
				}
			}
		}
		for pk, keys := range x.byPool {
			if len(keys) == 0 || len(keys) > len(x.claims) {
				rt.Fatalf("pool %v filed under %v, %d claims", pk, keys, len(x.claims))
			}
		}
	})
}
