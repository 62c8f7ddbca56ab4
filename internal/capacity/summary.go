package capacity

import (
	"sort"

	resourcev1 "k8s.io/api/resource/v1"
)

// Summary is one consumable capacity over the shared devices of a pool: its total, what a target
// utilisation makes schedulable, what is used, free, and fragmented (free on devices where it is
// less than the smallest request the device's policy accepts, so no valid request can use it).
type Summary struct {
	Capacity    string  `json:"capacity"`
	Devices     int     `json:"devices"`
	Total       int64   `json:"total"`
	Target      float64 `json:"target"`
	Schedulable int64   `json:"schedulable"`
	Used        int64   `json:"used"`
	Free        int64   `json:"free"`
	Fragmented  int64   `json:"fragmented"`
}

// Summarize adds up every shared device's capacities in the slices against the claims' shares.
// target is the utilisation aimed at (0.7: 100 devices x 40Gi -> 2800Gi schedulable).
func Summarize(slices []*resourcev1.ResourceSlice, claims []*resourcev1.ResourceClaim, target float64) []Summary {
	used := map[string]map[string]int64{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			key := r.Driver + "/" + r.Pool + "/" + r.Device
			for name, v := range r.ConsumedCapacity {
				if used[key] == nil {
					used[key] = map[string]int64{}
				}
				used[key][string(name)] += v.Value()
			}
		}
	}
	byName := map[string]*Summary{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
				continue
			}
			u := used[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+d.Name]
			for name, c := range d.Capacity {
				sum := byName[string(name)]
				if sum == nil {
					sum = &Summary{Capacity: string(name), Target: target}
					byName[string(name)] = sum
				}
				total, taken := c.Value.Value(), u[string(name)]
				free := max(total-taken, 0)
				sum.Devices++
				sum.Total += total
				sum.Used += taken
				sum.Free += free
				if free > 0 && free < SmallestRequest(c.RequestPolicy) {
					sum.Fragmented += free
				}
			}
		}
	}
	out := make([]Summary, 0, len(byName))
	for _, s := range byName {
		s.Schedulable = int64(float64(s.Total) * s.Target)
		out = append(out, *s)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Capacity < out[b].Capacity })
	return out
}

// SmallestRequest is the least a request may take under a capacity's request policy: its range
// minimum or smallest valid value (0: any amount).
func SmallestRequest(p *resourcev1.CapacityRequestPolicy) int64 {
	switch {
	case p == nil:
		return 0
	case p.ValidRange != nil && p.ValidRange.Min != nil:
		return p.ValidRange.Min.Value()
	case len(p.ValidValues) > 0:
		least := p.ValidValues[0].Value()
		for _, v := range p.ValidValues[1:] {
			least = min(least, v.Value())
		}
		return least
	}
	return 0
}
