package capacity

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func gpuClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + drv + `"`}}}}}
}

func want(name, mem string) *resourcev1.ResourceClaim {
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
	if mem != "" {
		req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": q(mem)}}
	}
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "t", UID: types.UID("uid-" + name)},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: req}}}}}
}

func TestFitWithTheSchedulersAllocator(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	sl := sharedSlice("n1", 1) // one shared GPU: 40Gi in 4Gi steps
	used := claim("t", "used", "gpu", share{"gpu", "gpu-0", "00000000-0000-0000-0000-000000000001", "32Gi"})
	c := Cluster{Nodes: []*corev1.Node{node}, Slices: []*resourcev1.ResourceSlice{sl}, Classes: []*resourcev1.DeviceClass{gpuClass()},
		Claims: []*resourcev1.ResourceClaim{used}}
	for _, tc := range []struct {
		name   string
		claims []*resourcev1.ResourceClaim
		fits   bool
	}{
		{"8Gi fits beside 32Gi", []*resourcev1.ResourceClaim{want("a", "8Gi")}, true},
		{"12Gi does not", []*resourcev1.ResourceClaim{want("a", "12Gi")}, false},
		{"two 4Gi fit", []*resourcev1.ResourceClaim{want("a", "4Gi"), want("b", "4Gi")}, true},
		{"two 8Gi do not", []*resourcev1.ResourceClaim{want("a", "8Gi"), want("b", "8Gi")}, false},
	} {
		got, err := Fit(ctx, c, tc.claims, "", false)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) != 1 || got[0].Fits != tc.fits {
			t.Errorf("%s: %+v", tc.name, got)
		}
		if tc.fits && got[0].Results[0].Devices.Results[0].ShareID == nil {
			t.Errorf("%s: a share without a ShareID: %+v", tc.name, got[0].Results)
		}
	}
	// A quarantine rule on the device: nothing fits unless the taint is ignored.
	c.TaintRules = []*resourcev1.DeviceTaintRule{{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: resourcev1.DeviceTaintRuleSpec{
		DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(drv), Pool: ptr.To("n1"), Device: ptr.To("gpu-0")},
		Taint:          resourcev1.DeviceTaint{Key: "devicewarden.io/quarantine", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}}
	if got, _ := Fit(ctx, c, []*resourcev1.ResourceClaim{want("a", "4Gi")}, "n1", false); got[0].Fits {
		t.Errorf("fits on a tainted device")
	}
	if got, _ := Fit(ctx, c, []*resourcev1.ResourceClaim{want("a", "4Gi")}, "n1", true); !got[0].Fits {
		t.Errorf("does not fit with the taint ignored")
	}
	if len(sl.Spec.Devices[0].Taints) != 0 {
		t.Errorf("the cluster's slice was changed: %+v", sl.Spec.Devices[0].Taints)
	}
	if _, err := Fit(ctx, c, []*resourcev1.ResourceClaim{want("a", "4Gi")}, "n9", false); err == nil {
		t.Errorf("an unknown node is not an error")
	}
	// A whole (not shared) device that is allocated is taken.
	whole := sharedSlice("n1", 1)
	whole.Spec.Devices[0].AllowMultipleAllocations = nil
	whole.Spec.Devices[0].Capacity = nil
	taken := claim("t", "taken", "gpu", share{req: "gpu", dev: "gpu-0"})
	c = Cluster{Nodes: c.Nodes, Slices: []*resourcev1.ResourceSlice{whole}, Classes: c.Classes, Claims: []*resourcev1.ResourceClaim{taken}}
	if got, _ := Fit(ctx, c, []*resourcev1.ResourceClaim{want("a", "")}, "", false); got[0].Fits {
		t.Errorf("an allocated whole device fits again")
	}
	c.Claims = nil
	if got, _ := Fit(ctx, c, []*resourcev1.ResourceClaim{want("a", "")}, "", false); !got[0].Fits {
		t.Errorf("a free whole device does not fit")
	}
}
