package sim

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/device"
)

// An 8-GPU partitionable node fits the apiserver's limits: at most 64 devices drawing on counters
// in a slice, at most 8 counter sets in one, every slice counted in the pool.
func TestPartitionedSlicesFitTheLimits(t *testing.T) {
	slices := PartitionedSlices("n", MaxPartitionedGPUs)
	forms := 0
	for _, s := range slices {
		if n := len(s.Spec.Devices); n > resourcev1.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Fatalf("slice %s has %d devices", s.Name, n)
		}
		if n := len(s.Spec.SharedCounters); n > resourcev1.ResourceSliceMaxCounterSets || (n > 0 && len(s.Spec.Devices) > 0) {
			t.Fatalf("slice %s: %d counter sets beside %d devices", s.Name, n, len(s.Spec.Devices))
		}
		if s.Spec.Pool.ResourceSliceCount != int64(len(slices)) {
			t.Fatalf("slice %s counts %d slices in the pool, want %d", s.Name, s.Spec.Pool.ResourceSliceCount, len(slices))
		}
		forms += len(s.Spec.Devices)
	}
	if forms != MaxPartitionedGPUs*FormsPerGPU || slices[1].Name != SliceName("n") {
		t.Fatalf("%d forms in %d slices (second %s)", forms, len(slices), slices[1].Name)
	}
}

// A fault named on a partition of a GPU published in the pool's second devices slice reaches every
// form of that GPU, and the kubelet reads it whichever slice keeps it.
func TestFaultOfAGPUInALaterSlice(t *testing.T) {
	var objs []runtime.Object
	for _, s := range PartitionedSlices("n", MaxPartitionedGPUs) {
		objs = append(objs, s)
	}
	cs := fake.NewClientset(objs...)
	ctx := context.Background()
	last := MaxPartitionedGPUs - 1
	part := device.ID{Driver: Driver, Pool: "n", Device: PartitionName(last, "1g.10gb", 3)}
	if err := SetFault(ctx, cs, part, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	state, err := (&Kubelet{Kube: cs}).faults(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(state["n"]) != FormsPerGPU {
		t.Fatalf("%d devices faulted, want gpu-%d's %d forms: %v", len(state["n"]), last, FormsPerGPU, state["n"])
	}
	if _, ok := state["n"][PartitionName(last, "3g.40gb", 1)]; !ok {
		t.Fatalf("a sibling form is not faulted: %v", state["n"])
	}
}
