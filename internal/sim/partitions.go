package sim

import (
	"context"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Profile is a partition profile of a simulated partitionable GPU, as a MIG profile is: how many
// of the GPU's 7 compute slices and how much of its memory one partition takes.
type Profile struct {
	Name   string // e.g. 1g.10gb
	Slices int64
	Memory string
}

// Profiles are the partition profiles the simulator publishes, each as many times as fits.
var Profiles = []Profile{{Name: "1g.10gb", Slices: 1, Memory: "10Gi"}, {Name: "3g.40gb", Slices: 3, Memory: "40Gi"}}

// gpuSlices and gpuMemory are one simulated GPU's counters.
const (
	gpuSlices = 7
	gpuMemory = "80Gi"
)

// FormsPerGPU is how many devices a partitionable GPU is published as: the whole device and as
// many partitions of each profile as fit it alone. A ResourceSlice whose devices draw on counters
// holds at most 64 of them, so a node's devices are published GPUsPerSlice GPUs to a slice; its
// counter sets, at most 8 to a slice, all in one: MaxPartitionedGPUs.
var (
	FormsPerGPU  = formsPerGPU()
	GPUsPerSlice = resourcev1.ResourceSliceMaxDevicesWithAdvancedFeatures / FormsPerGPU
)

// MaxPartitionedGPUs is how many partitionable GPUs a simulated node may have.
const MaxPartitionedGPUs = resourcev1.ResourceSliceMaxCounterSets

func formsPerGPU() int {
	n := 1
	for _, p := range Profiles {
		n += int(gpuSlices / p.Slices)
	}
	return n
}

// CounterSetName is the counter set of the node's i-th partitionable GPU.
func CounterSetName(i int) string { return "gpu-" + strconv.Itoa(i) + "-counters" }

// PartitionName is the k-th partition of a profile on the i-th GPU: gpu-<i>-mig-<profile>-<k>,
// the profile's dots made dashes (a device name is a DNS label).
func PartitionName(i int, profile string, k int) string {
	return "gpu-" + strconv.Itoa(i) + "-mig-" + strings.ReplaceAll(profile, ".", "-") + "-" + strconv.Itoa(k)
}

// PartitionedSlices are the ResourceSlices a driver with dynamic partitioning publishes for a
// node of gpus GPUs, in one pool: one slice carrying a counter set per GPU (its compute slices and
// memory), and slices of the devices drawing on them, GPUsPerSlice GPUs each (the first named
// SliceName(node), the others SliceName(node)-<k>): per GPU the whole device gpu-<i> (every
// counter) and each profile's partitions, as many as fit the GPU alone. The scheduler allocates a
// set of them only while their counters add up.
func PartitionedSlices(node string, gpus int) []*resourcev1.ResourceSlice {
	chunks := (gpus + GPUsPerSlice - 1) / GPUsPerSlice
	pool := resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(1 + chunks)}
	counters := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.sim-counters"},
		Spec:       resourcev1.ResourceSliceSpec{Driver: Driver, NodeName: ptr.To(node), Pool: pool},
	}
	out := []*resourcev1.ResourceSlice{counters}
	for i := range gpus {
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourcev1.CounterSet{
			Name: CounterSetName(i),
			Counters: map[string]resourcev1.Counter{
				"slices": {Value: *resource.NewQuantity(gpuSlices, resource.DecimalSI)},
				"memory": {Value: resource.MustParse(gpuMemory)},
			}})
		if i%GPUsPerSlice == 0 {
			name := SliceName(node)
			if k := i / GPUsPerSlice; k > 0 {
				name += "-" + strconv.Itoa(k)
			}
			out = append(out, &resourcev1.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       resourcev1.ResourceSliceSpec{Driver: Driver, NodeName: ptr.To(node), Pool: pool},
			})
		}
		devices := out[len(out)-1]
		devices.Spec.Devices = append(devices.Spec.Devices, partitionDevice(node, i, "gpu-"+strconv.Itoa(i), ProfileWhole, gpuSlices, gpuMemory))
		for _, p := range Profiles {
			for k := range int(gpuSlices / p.Slices) {
				devices.Spec.Devices = append(devices.Spec.Devices, partitionDevice(node, i, PartitionName(i, p.Name, k), p.Name, p.Slices, p.Memory))
			}
		}
	}
	return out
}

// partitionDevice is one form of the node's i-th GPU: the whole device or a partition.
func partitionDevice(node string, i int, name, profile string, slices int64, memory string) resourcev1.Device {
	parent := UUID(device.ID{Driver: Driver, Pool: node, Device: "gpu-" + strconv.Itoa(i)})
	d := resourcev1.Device{
		Name: name,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			AttrIndex:  {IntValue: ptr.To(int64(i))},
			AttrNode:   {StringValue: ptr.To(node)},
			AttrModel:  {StringValue: ptr.To("sim-a100")},
			AttrUUID:   {StringValue: ptr.To(UUID(device.ID{Driver: Driver, Pool: node, Device: name}))},
			AttrParent: {StringValue: ptr.To(parent)},
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}},
		ConsumesCounters: []resourcev1.DeviceCounterConsumption{{
			CounterSet: CounterSetName(i),
			Counters: map[string]resourcev1.Counter{
				"slices": {Value: *resource.NewQuantity(slices, resource.DecimalSI)},
				"memory": {Value: resource.MustParse(memory)},
			}}},
	}
	d.Attributes[AttrProfile] = resourcev1.DeviceAttribute{StringValue: ptr.To(profile)}
	return d
}

// Attributes of partitionable GPUs: the physical GPU's UUID on every form of it, and the form's
// profile (ProfileWhole for the whole GPU).
const (
	AttrParent   = "parentUUID"
	AttrProfile  = "profile"
	ProfileWhole = "whole"
)

// CreatePartitionedNodes creates count kwok nodes named <prefix>-<i> whose gpus GPUs are
// partitionable, each publishing PartitionedSlices. Existing nodes and slices are left as they are.
func CreatePartitionedNodes(ctx context.Context, cs kubernetes.Interface, prefix string, count, gpus int) ([]string, error) {
	return createNodes(ctx, cs, prefix, count, func(node string) []*resourcev1.ResourceSlice { return PartitionedSlices(node, gpus) })
}
