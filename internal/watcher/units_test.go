package watcher

import (
	"reflect"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
)

// partitioned is a device drawing on a counter set, with a parent attribute.
func partitioned(name, set, parent string) resourcev1.Device {
	return resourcev1.Device{Name: name,
		Attributes:       map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"parentUUID": {StringValue: ptr.To(parent)}},
		ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set}}}
}

// sliceOf records devices as the watcher does for a slice of the pool.
func sliceOf(pk poolKey, g device.Grouping, devs ...resourcev1.Device) *sliceInfo {
	info := &sliceInfo{pool: pk, node: pk.pool}
	for _, d := range devs {
		info.devices = append(info.devices, d.Name)
		info.units.add(pk.driver, d, g)
	}
	return info
}

// The watcher learns a device's physical unit from every slice of its pool: the counters slice
// publishes no device, the devices slices' partitions draw on one counter set per GPU.
func TestSliceIndexLearnsUnits(t *testing.T) {
	x := newSliceIndex()
	pk := poolKey{drv, "node-1"}
	g := device.Grouping{}
	x.set("counters", sliceOf(pk, g))
	x.set("a", sliceOf(pk, g, partitioned("gpu-0", "gpu-0-counters", "G0"), partitioned("gpu-0-mig-1g-10gb-0", "gpu-0-counters", "G0")))
	x.set("b", sliceOf(pk, g, partitioned("gpu-0-mig-3g-40gb-0", "gpu-0-counters", "G0"), partitioned("gpu-1", "gpu-1-counters", "G1"),
		resourcev1.Device{Name: "nic-0"}))
	u, ok := x.unit(device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0-mig-1g-10gb-0"}, g)
	want := device.Unit{ID: device.UnitID{Driver: drv, Pool: "node-1", Key: "counters=gpu-0-counters"},
		Devices: []string{"gpu-0", "gpu-0-mig-1g-10gb-0", "gpu-0-mig-3g-40gb-0"}}
	if !ok || !reflect.DeepEqual(u, want) {
		t.Fatalf("unit %+v %v\nwant %+v", u, ok, want)
	}
	if u, _ := x.unit(device.ID{Driver: drv, Pool: "node-1", Device: "nic-0"}, g); u.Shared() || u.ID.Key != "nic-0" {
		t.Fatalf("a device that draws on no counters: %+v", u)
	}
	// A partition published later joins the unit.
	x.set("c", sliceOf(pk, g, partitioned("gpu-0-mig-1g-10gb-1", "gpu-0-counters", "G0")))
	if u, _ := x.unit(device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}, g); len(u.Devices) != 4 {
		t.Fatalf("after a new partition: %v", u.Devices)
	}
	if _, ok := x.unit(device.ID{Driver: drv, Pool: "node-1", Device: "gpu-9"}, g); ok {
		t.Fatal("a unit for a device no slice publishes")
	}
}

// Under an attribute grouping, the attribute's value decides.
func TestSliceIndexUnitsByAttribute(t *testing.T) {
	x := newSliceIndex()
	pk := poolKey{drv, "node-1"}
	g := device.Grouping{Attribute: "parentUUID"}
	x.set("a", sliceOf(pk, g, partitioned("p-0", "set-a", "G0"), partitioned("p-1", "set-b", "G0"), partitioned("p-2", "set-a", "G1")))
	u, _ := x.unit(device.ID{Driver: drv, Pool: "node-1", Device: "p-0"}, g)
	if !reflect.DeepEqual(u.Devices, []string{"p-0", "p-1"}) || u.ID.Key != "parentUUID=G0" {
		t.Fatalf("unit %+v", u)
	}
}

// The whole device is the form that takes its counter set in full, whatever its name; a device
// of its own is no unit's member; and once the pool's grouped slices are gone, no report looks
// for a unit.
func TestWholeFormAndDevicesOfTheirOwn(t *testing.T) {
	w := New(Config{})
	pk := poolKey{drv, "node-1"}
	counters := &sliceInfo{pool: pk}
	counters.units.addCounters([]resourcev1.CounterSet{{Name: "set", Counters: map[string]resourcev1.Counter{
		"slices": {Value: *resource.NewQuantity(7, resource.DecimalSI)}}}})
	w.slices.set("counters", counters)
	w.slices.set("devices", sliceOf(pk, device.Grouping{}, gpuForm("a-part", "set", 1), gpuForm("z-whole", "set", 7), resourcev1.Device{Name: "nic-0"}))
	if u, ok := w.slices.unit(device.ID{Driver: drv, Pool: "node-1", Device: "a-part"}, device.Grouping{}); !ok || u.Whole != "z-whole" {
		t.Fatalf("unit %+v: want z-whole as the whole device", u)
	}
	nic := device.ID{Driver: drv, Pool: "node-1", Device: "nic-0"}
	if id, member := w.unitOf(nic); id != nic || member != "" {
		t.Fatalf("a device of its own: %v %q", id, member)
	}
	if w.slices.grouping.Load() != 1 {
		t.Fatalf("grouped slices %d, want 1", w.slices.grouping.Load())
	}
	w.slices.set("devices", nil)
	if w.slices.grouping.Load() != 0 {
		t.Fatalf("grouped slices %d after the slice is gone", w.slices.grouping.Load())
	}
}
