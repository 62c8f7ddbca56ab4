package healthreport

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Resolve finds the one published device a checked report names, among the ResourceSlices given
// (those of the report's node, or of its driver): by its DRA name, or by the attribute its driver
// publishes. A report that matches no device, or more than one, is refused with the reason.
func Resolve(s Spec, published []resourcev1.ResourceSlice) (device.ID, error) {
	if err := s.Check(); err != nil {
		return device.ID{}, err
	}
	if d := s.Device; d != nil {
		id := device.ID{Driver: d.Driver, Pool: d.Pool, Device: d.Name}
		for _, sl := range published {
			if sl.Spec.Driver != d.Driver || sl.Spec.Pool.Name != d.Pool {
				continue
			}
			if slices.ContainsFunc(sl.Spec.Devices, func(dev resourcev1.Device) bool { return dev.Name == d.Name }) {
				return id, nil
			}
		}
		return device.ID{}, fmt.Errorf("no such device: %s is not published in a ResourceSlice", id)
	}
	var found []device.ID
	for _, sl := range published {
		if sl.Spec.NodeName == nil || *sl.Spec.NodeName != s.Node || s.Driver != "" && sl.Spec.Driver != s.Driver {
			continue
		}
		for _, dev := range sl.Spec.Devices {
			if carries(sl.Spec.Driver, dev, *s.Attribute) {
				id := device.ID{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Device: dev.Name}
				if !slices.Contains(found, id) {
					found = append(found, id)
				}
			}
		}
	}
	a := s.Attribute
	switch len(found) {
	case 0:
		return device.ID{}, fmt.Errorf("no such device: no device on node %s publishes %s=%s", s.Node, a.Name, a.Value)
	case 1:
		return found[0], nil
	}
	if whole, ok := oneUnit(found, published); ok {
		// The forms of one partitionable GPU all publish its index: they are one unit, fenced
		// as one, so any of them names it; the whole GPU does best.
		return whole, nil
	}
	names := make([]string, len(found))
	for i, id := range found {
		names[i] = id.String()
	}
	return device.ID{}, fmt.Errorf("%d devices match %s=%s on node %s (%s): name the device exactly", len(found), a.Name, a.Value,
		s.Node, strings.Join(names, ", "))
}

// carries says whether a device publishes the attribute with the value. A name without a domain
// is the driver's own ("uuid" is "gpu.nvidia.com/uuid" of that driver's devices); values compare
// without regard to case (UUIDs and PCI addresses are written both ways).
func carries(driver string, dev resourcev1.Device, a Attribute) bool {
	for name, v := range dev.Attributes {
		if !sameAttribute(string(name), driver, a.Name) {
			continue
		}
		var got string
		switch {
		case v.StringValue != nil:
			got = *v.StringValue
		case v.IntValue != nil:
			got = strconv.FormatInt(*v.IntValue, 10)
		case v.VersionValue != nil:
			got = *v.VersionValue
		case v.BoolValue != nil:
			got = strconv.FormatBool(*v.BoolValue)
		}
		if strings.EqualFold(got, a.Value) {
			return true
		}
	}
	return false
}

// sameAttribute compares a published attribute's name with a report's: both qualified, or both
// taken in the driver's domain.
func sameAttribute(published, driver, asked string) bool {
	local := func(n string) string {
		if domain, id, ok := strings.Cut(n, "/"); ok {
			if domain != driver {
				return n
			}
			return id
		}
		return n
	}
	return published == asked || local(published) == local(asked)
}

// oneUnit says whether the devices found are the forms of one physical device: one driver's, in
// one pool, every one drawing on one counter set. It returns the form that draws on the most
// counters of it (the whole device: its partitions draw on some).
func oneUnit(found []device.ID, published []resourcev1.ResourceSlice) (device.ID, bool) {
	sets := map[device.ID][]resourcev1.DeviceCounterConsumption{}
	for _, sl := range published {
		for _, dev := range sl.Spec.Devices {
			id := device.ID{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Device: dev.Name}
			if slices.Contains(found, id) {
				sets[id] = dev.ConsumesCounters
			}
		}
	}
	var shared string
	var whole device.ID
	most := -1
	for i, id := range found {
		if id.Driver != found[0].Driver || id.Pool != found[0].Pool || len(sets[id]) != 1 {
			return device.ID{}, false
		}
		c := sets[id][0]
		if i == 0 {
			shared = c.CounterSet
		}
		if c.CounterSet != shared {
			return device.ID{}, false
		}
		if len(c.Counters) > most {
			whole, most = id, len(c.Counters)
		}
	}
	return whole, shared != ""
}
