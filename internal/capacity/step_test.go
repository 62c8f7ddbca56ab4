package capacity

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// stepPolicy is a request policy: a range from min in steps of step, and a default.
func stepPolicy(min, step, max, def string) *resourcev1.CapacityRequestPolicy {
	p := &resourcev1.CapacityRequestPolicy{ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: ptr.To(q(min)), Step: ptr.To(q(step))}}
	if max != "" {
		p.ValidRange.Max = ptr.To(q(max))
	}
	if def != "" {
		p.Default = ptr.To(q(def))
	}
	return p
}

// What the step check calls a breach matches the scheduler's allocator under both settings of
// DRAFractionalCapacityRange: off (a 1.37 cluster's default), a 1500m step counts as Value()'s 2
// and only whole numbers are granted; on, it counts in milli-units. The default is exempt.
// Before, 1250m passed (Value() rounds it to 2), which neither setting can grant.
func TestStepCheckCountsAsTheAllocatorDoes(t *testing.T) {
	dev := &resourcev1.Device{Name: "gpu-0"}
	for _, c := range []struct {
		name, min, step, def, share string
		breachOff, breachOn         bool
	}{
		{"two steps of 1500m", "0", "1500m", "", "3", true, false},
		{"one step of 1500m", "0", "1500m", "", "1500m", true, false},
		{"1250m is on no grid", "0", "1500m", "", "1250m", true, true},
		{"2 is one rounded-up step", "0", "1500m", "", "2", false, true},
		{"min 500m, step 250m", "500m", "250m", "", "1250m", true, false},
		{"min 500m, step 250m, whole", "500m", "250m", "", "2", false, false},
		{"whole units", "4Gi", "4Gi", "", "12Gi", false, false},
		{"whole units, off", "4Gi", "4Gi", "", "10Gi", true, true},
		{"the default, off the grid, is exempt", "4Gi", "4Gi", "6Gi", "6Gi", false, false},
		{"past the milli range, on the grid", "0", "1E", "", "8E", false, false},
		{"past the milli range, off", "0", "3E", "", "8E", true, true},
		{"a 1m step counts in milli-units", "0", "1m", "", "1500m", true, false},
		{"the largest int64 is whole, past the milli range", "0", "1", "", "9223372036854775807", false, true},
		{"the largest milli-value", "0", "1", "", "9223372036854775", false, false},
	} {
		pol := stepPolicy(c.min, c.step, "", c.def)
		for _, fractional := range []bool{false, true} {
			was := Features.FractionalCapacityRange
			Features.FractionalCapacityRange = fractional
			got := policyBreach(dev, "memory", q(c.share), map[string]resourcev1.CapacityRequestPolicy{"memory": *pol})
			Features.FractionalCapacityRange = was
			want := map[bool]bool{false: c.breachOff, true: c.breachOn}[fractional]
			if (got != "") != want {
				t.Errorf("%s (fractional %v): share %s under min %s step %s default %q: breach %q, want breach %v", c.name, fractional, c.share, c.min, c.step, c.def, got, want)
			}
		}
	}
}

// Every share the scheduler's own allocator grants, rounded up to the policy's grid, is no breach:
// the real allocator (structured.NewAllocator) is asked for each request.
func TestTheAllocatorsGrantsAreNoBreach(t *testing.T) {
	for _, fractional := range []bool{false, true} {
		was := Features.FractionalCapacityRange
		Features.FractionalCapacityRange = fractional
		allocatorGrantsAreNoBreach(t, fractional)
		Features.FractionalCapacityRange = was
	}
}

func allocatorGrantsAreNoBreach(t *testing.T, fractional bool) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	for _, pol := range []*resourcev1.CapacityRequestPolicy{
		stepPolicy("0", "1500m", "40", ""),
		stepPolicy("500m", "250m", "40", ""),
		stepPolicy("1", "3", "40", ""),
		stepPolicy("4", "4", "40", "6"),
	} {
		granted := 0
		for _, req := range []string{"", "1", "1250m", "2", "2600m", "3", "7", "10"} {
			sl := sharedSlice("n1", 1)
			sl.Spec.Devices[0].Capacity = map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: q("40"), RequestPolicy: pol}}
			c := Cluster{Nodes: []*corev1.Node{node}, Slices: []*resourcev1.ResourceSlice{sl}, Classes: []*resourcev1.DeviceClass{gpuClass()}}
			got, err := Fit(ctx, c, []*resourcev1.ResourceClaim{want("a", req)}, "", false)
			if err != nil || len(got) != 1 {
				t.Fatalf("policy %+v, request %q: %+v %v", pol.ValidRange, req, got, err)
			}
			if !got[0].Fits {
				continue // the allocator grants nothing (a whole 40 off a fractional grid): no share to check
			}
			granted++
			consumed := got[0].Results[0].Devices.Results[0].ConsumedCapacity["memory"]
			if v := policyBreach(&sl.Spec.Devices[0], "memory", consumed, nil); v != "" {
				t.Errorf("fractional %v, policy min %s step %s default %v, request %q: the allocator granted %s, called a breach: %s",
					fractional, pol.ValidRange.Min, pol.ValidRange.Step, pol.Default, req, consumed.String(), v)
			}
		}
		if granted < 6 {
			t.Errorf("fractional %v, policy %+v: the allocator granted %d of 8 requests", fractional, pol.ValidRange, granted)
		}
	}
}
