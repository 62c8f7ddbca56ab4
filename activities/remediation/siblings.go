package remediation

import (
	"slices"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/internal/device"
)

// withSiblings adds to idle every device that draws on a counter set the repaired device draws
// on, as the driver's slices publish them (the newest generation of its pool): the forms of one
// physical GPU. A workflow that knows only
// its own form (one started before the watcher knew the unit) then sees a claim on any other form,
// the repair Pod of the unit's own workflow among them, and waits: two workflows never repair one
// GPU at the same time.
func withSiblings(published []resourcev1.ResourceSlice, id device.ID, idle []device.ID) []device.ID {
	var gen int64 = -1
	for _, s := range published {
		if s.Spec.Pool.Name == id.Pool {
			gen = max(gen, s.Spec.Pool.Generation)
		}
	}
	var offers []device.Offer
	for _, s := range published {
		if s.Spec.Pool.Name != id.Pool || s.Spec.Pool.Generation != gen {
			continue
		}
		for _, d := range s.Spec.Devices {
			o := device.Offer{Name: d.Name}
			for _, c := range d.ConsumesCounters {
				o.CounterSets = append(o.CounterSets, c.CounterSet)
			}
			offers = append(offers, o)
		}
	}
	out := slices.Clone(idle)
	u, ok := device.Of(device.Units(id.Driver, id.Pool, offers, device.Grouping{}), id.Device)
	if !ok {
		return out
	}
	for _, d := range u.DeviceIDs() {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}
