package watcher

import (
	"testing"

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
	if len(gone) != 1 || gone[0] != (device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}) || node != "node-1" {
		t.Fatalf("gone %v node %q", gone, node)
	}
	if _, back, _ := x.set("s1", &sliceInfo{pool: pk, node: "node-1", devices: []string{"gpu-0", "gpu-1"}}); len(back) != 1 {
		t.Fatalf("back %v", back)
	}
}
