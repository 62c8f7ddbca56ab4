// Package sim plays a DRA GPU driver and kubelet on a local cluster: it publishes devices on kwok
// nodes and writes device health into pod status, so demos and tests can inject faults.
package sim

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/localcluster"
)

// Driver is the simulated DRA driver's name; it is also the DeviceClass name.
const Driver = "gpu.sim.devicewarden.io"

// Attribute names published on every simulated device (qualified by the driver's domain).
const (
	AttrIndex = "index"
	AttrNode  = "node"
	AttrModel = "model"
	AttrUUID  = "uuid"
)

// Identity are the attributes that single out one simulated device for a probe: its node and
// index, and its UUID, which tells apart the forms of a partitionable GPU (they share the index).
var Identity = []string{AttrNode, AttrIndex, AttrUUID}

// PluginResource is the extended resource a simulated device plugin advertises on every sim node.
const PluginResource = "fpga.sim.devicewarden.io/fpga"

// PluginDevices is how many device-plugin devices each sim node has.
const PluginDevices = 4

// LabelSimNode marks nodes the simulator created.
const LabelSimNode = "sim.devicewarden.io/node"

// EnsureDeviceClass creates the DeviceClass that selects every simulated GPU.
func EnsureDeviceClass(ctx context.Context, cs kubernetes.Interface) error {
	return EnsureClass(ctx, cs, Driver)
}

// EnsureClass creates a DeviceClass of the given name that selects every simulated GPU (a policy
// file can then give devices requested through it a policy of their own).
func EnsureClass(ctx context.Context, cs kubernetes.Interface, name string) error {
	dc := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", Driver)},
		}}},
	}
	_, err := cs.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create device class: %w", err)
	}
	return nil
}

// NodeName is the name of the i-th simulated node with the given prefix.
func NodeName(prefix string, i int) string { return prefix + "-" + strconv.Itoa(i) }

// CreateNodes creates count kwok nodes named <prefix>-<i>, each publishing one ResourceSlice with
// devices gpu-0..gpu-(devices-1). Existing nodes and slices are left as they are.
func CreateNodes(ctx context.Context, cs kubernetes.Interface, prefix string, count, devices int) ([]string, error) {
	return createNodes(ctx, cs, prefix, count, func(node string) []*resourcev1.ResourceSlice {
		return []*resourcev1.ResourceSlice{nodeSlice(node, devices, false)}
	})
}

// CreateSharedNodes creates count kwok nodes like CreateNodes whose devices are shared (consumable
// memory); unenforced nodes' driver does not hold tenants to their shares.
func CreateSharedNodes(ctx context.Context, cs kubernetes.Interface, prefix string, count, devices int, unenforced bool) ([]string, error) {
	names, err := createNodes(ctx, cs, prefix, count, func(node string) []*resourcev1.ResourceSlice {
		return []*resourcev1.ResourceSlice{nodeSlice(node, devices, true)}
	})
	if err != nil || !unenforced {
		return names, err
	}
	for _, n := range names {
		patch := []byte(`{"metadata":{"annotations":{"` + AnnotationUnenforced + `":"true"}}}`)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, fmt.Errorf("mark node %s unenforced: %w", n, err)
		}
	}
	return names, nil
}

// createNodes creates count kwok nodes named <prefix>-<i>, each publishing the slices slices
// makes for it. Existing nodes and slices are left as they are.
func createNodes(ctx context.Context, cs kubernetes.Interface, prefix string, count int, slices func(node string) []*resourcev1.ResourceSlice) ([]string, error) {
	if err := EnsureDeviceClass(ctx, cs); err != nil {
		return nil, err
	}
	names := make([]string, 0, count)
	for i := 0; i < count; i++ {
		name := NodeName(prefix, i)
		if err := createNode(ctx, cs, name); err != nil {
			return nil, err
		}
		for _, s := range slices(name) {
			if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("create resource slice %s: %w", s.Name, err)
			}
		}
		names = append(names, name)
	}
	return names, nil
}

// kwokNode is a simulated node kwok runs Pods on: 64 CPUs, 512Gi, 1000 Pods.
func kwokNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("1000"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{LabelSimNode: "true", "kubernetes.io/hostname": name, "type": "kwok"},
			Annotations: map[string]string{localcluster.KwokNodeAnnotation: "fake"},
		},
		// A boot ID, as kubelet reports one: a node step tells the node's reboot by its change.
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, NodeInfo: corev1.NodeSystemInfo{BootID: string(uuid.NewUUID())}},
	}
}

// ensureNode creates the node unless it exists.
func ensureNode(ctx context.Context, cs kubernetes.Interface, node *corev1.Node) error {
	_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", node.Name, err)
	}
	return nil
}

// createNode creates a GPU node that also has PluginDevices device-plugin devices.
func createNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	node := kwokNode(name)
	for _, l := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		l[PluginResource] = *resource.NewQuantity(PluginDevices, resource.DecimalSI)
	}
	return ensureNode(ctx, cs, node)
}

// SliceName is the name of the ResourceSlice the simulated driver publishes for a node.
func SliceName(node string) string { return node + "-gpu.sim" }

// nodeSlice is the ResourceSlice of a node's devices gpu-0..gpu-(devices-1). Shared devices allow
// several allocations, each taking a share of the device's memory.
func nodeSlice(node string, devices int, shared bool) *resourcev1.ResourceSlice {
	return NodeSlice(node, devices, shared)
}

// NodeSlice is the ResourceSlice the simulated driver publishes for a node with the given devices.
func NodeSlice(node string, devices int, shared bool) *resourcev1.ResourceSlice {
	devs := make([]resourcev1.Device, 0, devices)
	for i := 0; i < devices; i++ {
		d := resourcev1.Device{
			Name: "gpu-" + strconv.Itoa(i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				AttrIndex: {IntValue: ptr.To(int64(i))},
				AttrNode:  {StringValue: ptr.To(node)},
				AttrModel: {StringValue: ptr.To("sim-a100")},
				AttrUUID:  {StringValue: ptr.To(UUID(device.ID{Driver: Driver, Pool: node, Device: "gpu-" + strconv.Itoa(i)}))},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: resource.MustParse("80Gi")},
			},
		}
		if shared {
			d.AllowMultipleAllocations = ptr.To(true)
			d.Capacity["memory"] = resourcev1.DeviceCapacity{Value: resource.MustParse(SharedMemory),
				RequestPolicy: &resourcev1.CapacityRequestPolicy{
					Default:    ptr.To(resource.MustParse(SharedMin)),
					ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse(SharedMin)), Step: ptr.To(resource.MustParse(SharedMin)), Max: ptr.To(resource.MustParse(SharedMemory))},
				}}
		}
		devs = append(devs, d)
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: SliceName(node)},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   Driver,
			NodeName: ptr.To(node),
			Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices:  devs,
		},
	}
}

// A shared simulated GPU's memory, and the request policy's minimum and step.
const (
	SharedMemory = "40Gi"
	SharedMin    = "4Gi"
)
