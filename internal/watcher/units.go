package watcher

import (
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/internal/device"
)

// unitInfo is what groups a slice's devices into physical units: the counter sets each draws on,
// and its value of the driver's grouping attribute when the policy names one. Devices that draw
// on nothing and carry no such attribute are not listed.
type unitInfo struct {
	counterSets map[string][]string
	attr        map[string]string
}

// add records one device of the slice.
func (u *unitInfo) add(driver string, d resourcev1.Device, g device.Grouping) {
	for _, c := range d.ConsumesCounters {
		if u.counterSets == nil {
			u.counterSets = map[string][]string{}
		}
		u.counterSets[d.Name] = append(u.counterSets[d.Name], c.CounterSet)
	}
	if g.Attribute == "" {
		return
	}
	if v, ok := attributeValues(driver, d, []string{g.Attribute})[g.Attribute]; ok {
		if u.attr == nil {
			u.attr = map[string]string{}
		}
		u.attr[d.Name] = v
	}
}

// unit is the physical unit of a published device under the grouping, from every slice of its
// pool; false when no slice publishes the device.
func (x *sliceIndex) unit(id device.ID, g device.Grouping) (device.Unit, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	pk := poolKey{id.Driver, id.Pool}
	if x.pools[pk][id.Device] == 0 {
		return device.Unit{}, false
	}
	seen := map[string]bool{}
	var offers []device.Offer
	for _, s := range x.slices {
		if s.pool != pk {
			continue
		}
		for _, d := range s.devices {
			if seen[d] {
				continue
			}
			seen[d] = true
			o := device.Offer{Name: d, CounterSets: s.units.counterSets[d]}
			if v, ok := s.units.attr[d]; ok {
				o.Attributes = map[string]string{g.Attribute: v}
			}
			offers = append(offers, o)
		}
	}
	return device.Of(device.Units(id.Driver, id.Pool, offers, g), id.Device)
}
