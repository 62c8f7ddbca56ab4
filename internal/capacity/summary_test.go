package capacity

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestSummarizeUtilisationArithmetic(t *testing.T) {
	const gi = int64(1) << 30
	pool := func(n int) []*resourcev1.ResourceSlice {
		var out []*resourcev1.ResourceSlice
		for i := 0; i < n; i += 4 {
			out = append(out, sharedSlice("n"+string(rune('a'+i/4)), min(4, n-i)))
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		devices     int
		target      float64
		claims      []*resourcev1.ResourceClaim
		schedulable int64
		used, free  int64
		fragmented  int64
	}{
		{"100 x 40Gi at 70%", 100, 0.7, nil, 2800 * gi, 0, 4000 * gi, 0},
		{"100 x 40Gi at 100%", 100, 1, nil, 4000 * gi, 0, 4000 * gi, 0},
		{"8 x 40Gi at 50%", 8, 0.5, nil, 160 * gi, 0, 320 * gi, 0},
		// 38Gi taken on one GPU: 2Gi left there, under the 4Gi smallest request.
		{"a fragment", 4, 0.7, []*resourcev1.ResourceClaim{claim("t", "a", "gpu", share{"gpu", "gpu-0", "s", "38Gi"})}, 112 * gi, 38 * gi, 122 * gi, 2 * gi},
		// 4Gi left is exactly a valid request: usable.
		{"exactly the smallest", 4, 0.7, []*resourcev1.ResourceClaim{claim("t", "a", "gpu", share{"gpu", "gpu-0", "s", "36Gi"})}, 112 * gi, 36 * gi, 124 * gi, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slices := pool(tc.devices)
			for _, c := range tc.claims {
				c.Status.Allocation.Devices.Results[0].Pool = slices[0].Spec.Pool.Name
			}
			s := Summarize(slices, tc.claims, tc.target)
			if len(s) != 1 {
				t.Fatalf("summary = %+v", s)
			}
			got := s[0]
			if got.Devices != tc.devices || got.Schedulable != tc.schedulable || got.Used != tc.used || got.Free != tc.free || got.Fragmented != tc.fragmented {
				t.Errorf("summary = %+v", got)
			}
		})
	}
	// Whole devices and admin access count for nothing here.
	whole := sharedSlice("w", 1)
	whole.Spec.Devices[0].AllowMultipleAllocations = ptr.To(false)
	admin := claim("t", "look", "gpu", share{"gpu", "gpu-0", "s", "40Gi"})
	admin.Status.Allocation.Devices.Results[0].Pool = "x"
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	if s := Summarize([]*resourcev1.ResourceSlice{whole, sharedSlice("x", 1)}, []*resourcev1.ResourceClaim{admin}, 1); len(s) != 1 || s[0].Devices != 1 || s[0].Used != 0 {
		t.Errorf("summary = %+v", s)
	}
	if SmallestRequest(&resourcev1.CapacityRequestPolicy{ValidValues: []resource.Quantity{q("8Gi"), q("2Gi")}}) != 2*gi {
		t.Errorf("smallest of valid values")
	}
}

func TestSummarizeOrdersCapacities(t *testing.T) {
	sl := sharedSlice("n1", 1)
	sl.Spec.Devices[0].Capacity["bandwidth"] = resourcev1.DeviceCapacity{Value: q("100")}
	s := Summarize([]*resourcev1.ResourceSlice{sl}, nil, 1)
	if len(s) != 2 || s[0].Capacity != "bandwidth" || s[1].Capacity != "memory" {
		t.Errorf("summary = %+v", s)
	}
}
