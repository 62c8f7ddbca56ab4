package watcher

import (
	"reflect"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
)

func TestSliceIndexGoneAndBack(t *testing.T) {
	x := newSliceIndex()
	pk := poolKey{drv, "node-1"}
	if gone, back, _ := x.set("s1", &sliceInfo{pool: pk, node: "node-1", devices: []string{"gpu-0", "gpu-1"}}); len(gone)+len(back) != 0 {
		t.Fatalf("first publication: gone %v back %v", gone, back)
	}
	// gpu-1 moves to a second slice of the same pool: not gone.
	x.set("s2", &sliceInfo{pool: pk, node: "node-1", devices: []string{"gpu-1"}})
	if gone, _, _ := x.set("s1", &sliceInfo{pool: pk, node: "node-1", devices: []string{"gpu-0"}}); len(gone) != 0 {
		t.Fatalf("a moved device was reported gone: %v", gone)
	}
	gone, _, node := x.set("s2", nil)
	gpu1 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	if len(gone) != 1 || gone[0] != gpu1 || node != "node-1" {
		t.Fatalf("gone %v node %q", gone, node)
	}
	x.markMissing(gpu1, "ns/claim")
	if _, back, _ := x.set("s1", &sliceInfo{pool: pk, node: "node-1", devices: []string{"gpu-0", "gpu-1"}}); len(back) != 1 || back[0] != gpu1 {
		t.Fatalf("back %v", back)
	}
	// Back once only; a device that was never reported gone is not "back".
	if _, back, _ := x.set("s3", &sliceInfo{pool: pk, node: "node-1", devices: []string{"gpu-1", "gpu-7"}}); len(back) != 0 {
		t.Fatalf("back again %v", back)
	}
}

// A driver restart re-creates the pool's slice under a new generated name: the device's Unknown
// must clear although no slice of the old name comes back.
func TestSliceBackUnderANewName(t *testing.T) {
	x := newSliceIndex()
	pk := poolKey{drv, "node-1"}
	x.set("node-1-gpu-abcde", &sliceInfo{pool: pk, node: "node-1", devices: []string{"gpu-0"}})
	gone, _, _ := x.set("node-1-gpu-abcde", nil)
	x.markMissing(gone[0], "ns/claim")
	_, back, _ := x.set("node-1-gpu-fghij", &sliceInfo{pool: pk, node: "node-1", devices: []string{"gpu-0"}})
	if len(back) != 1 || back[0] != gone[0] {
		t.Fatalf("back %v", back)
	}
}

func TestMissingDeviceReleasedWithItsClaim(t *testing.T) {
	x := newSliceIndex()
	gpu0 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	gpu1 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	x.markMissing(gpu0, "ns/a")
	x.markMissing(gpu1, "ns/b")
	still := compactClaim(claimWith("a", result("gpus", "gpu-0")), nil)
	if got := x.released("ns/a", still); len(got) != 0 {
		t.Fatalf("released while still held: %v", got)
	}
	if got := x.released("ns/a", &Claim{}); len(got) != 1 || got[0] != gpu0 {
		t.Fatalf("deallocated claim released %v", got)
	}
	if got := x.released("ns/b", nil); len(got) != 1 || got[0] != gpu1 {
		t.Fatalf("deleted claim released %v", got)
	}
	if got := x.released("ns/b", nil); len(got) != 0 {
		t.Fatalf("released twice: %v", got)
	}
}

// At start only a pool that is published without the device says it is missing; a pool with no
// slice at all (a node gone, a driver not yet up) says nothing, so a fleet without slices does not
// turn every allocated device Unknown at once.
func TestUnpublishedNeedsAPublishedPool(t *testing.T) {
	x := newSliceIndex()
	x.set("s1", &sliceInfo{pool: poolKey{drv, "node-1"}, node: "node-1", devices: []string{"gpu-0"}})
	if !x.unpublished(device.ID{Driver: drv, Pool: "node-1", Device: "gpu-9"}) {
		t.Fatal("a device its published pool lacks is not unpublished")
	}
	if x.unpublished(device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}) {
		t.Fatal("a published device is unpublished")
	}
	if x.unpublished(device.ID{Driver: drv, Pool: "node-2", Device: "gpu-0"}) {
		t.Fatal("a pool with no slice made its device unpublished")
	}
}

// CDI styles that name devices by an attribute read it from the slice: kept while any slice of
// the pool publishes the device, gone with it, and read under the driver's domain too.
func TestSliceAttributesForCDI(t *testing.T) {
	x := newSliceIndex()
	pk := poolKey{drv, "node-1"}
	gpu0 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	x.set("s1", &sliceInfo{pool: pk, devices: []string{"gpu-0"}, attrs: map[string]map[string]string{"gpu-0": {"uuid": "GPU-0"}}})
	x.set("s2", &sliceInfo{pool: pk, devices: []string{"gpu-0"}, attrs: map[string]map[string]string{"gpu-0": {"uuid": "GPU-0"}}})
	x.set("s1", nil)
	if v, ok := x.attribute(gpu0, "uuid"); !ok || v != "GPU-0" {
		t.Fatalf("still published by s2: %q %v", v, ok)
	}
	x.set("s2", nil)
	if v, ok := x.attribute(gpu0, "uuid"); ok {
		t.Fatalf("device gone, attribute kept: %q", v)
	}

	d := resourcev1.Device{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		resourcev1.QualifiedName(drv + "/uuid"): {StringValue: ptr.To("GPU-abc")},
		"index":                                 {IntValue: ptr.To(int64(3))},
		"driverVersion":                         {VersionValue: ptr.To("1.2.3")},
		"healthy":                               {BoolValue: ptr.To(true)},
	}}
	got := attributeValues(drv, d, []string{"uuid", "index", "driverVersion", "healthy", "serial"})
	want := map[string]string{"uuid": "GPU-abc", "index": "3", "driverVersion": "1.2.3"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("attributes %v, want %v", got, want)
	}
	if got := attributeValues(drv, d, []string{"other.example.com/uuid"}); got != nil {
		t.Fatalf("another domain's attribute matched: %v", got)
	}
}

// The driver's own taints are reported with exact identity; effect None only informs; taking a
// taint off (or deleting the slice) is reported once as cleared.
func TestDriverTaints(t *testing.T) {
	taints := []resourcev1.DeviceTaint{{Key: "gpu.example.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoExecute},
		{Key: "info", Effect: resourcev1.DeviceTaintEffectNone}}
	if got := driverTaint(taints); !strings.Contains(got, "gpu.example.com/xid=79:NoExecute") || strings.Contains(got, "info") {
		t.Fatalf("driverTaint = %q", got)
	}
	if got := driverTaint(taints[1:]); got != "" {
		t.Fatalf("effect None acted: %q", got)
	}
	x := newSliceIndex()
	pk := poolKey{drv, "node-1"}
	gpu1 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	tainted, cleared := x.taintChanges("s1", &sliceInfo{pool: pk, devices: []string{"gpu-0", "gpu-1"}, taints: map[string]string{"gpu-1": "xid"}})
	if len(tainted) != 1 || tainted[gpu1] != "xid" || len(cleared) != 0 {
		t.Fatalf("tainted %v cleared %v", tainted, cleared)
	}
	if tainted, cleared = x.taintChanges("s1", &sliceInfo{pool: pk, devices: []string{"gpu-0", "gpu-1"}, taints: map[string]string{"gpu-1": "xid"}}); len(tainted)+len(cleared) != 0 {
		t.Fatalf("an unchanged taint reported again: %v %v", tainted, cleared)
	}
	if _, cleared = x.taintChanges("s1", &sliceInfo{pool: pk, devices: []string{"gpu-0", "gpu-1"}}); len(cleared) != 1 || cleared[0] != gpu1 {
		t.Fatalf("cleared %v", cleared)
	}
	x.taintChanges("s1", &sliceInfo{pool: pk, devices: []string{"gpu-1"}, taints: map[string]string{"gpu-1": "ecc"}})
	if _, cleared = x.taintChanges("s1", nil); len(cleared) != 1 || len(x.taints) != 0 {
		t.Fatalf("slice deleted: cleared %v, kept %v", cleared, x.taints)
	}
}
