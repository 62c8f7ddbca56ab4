package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// GPUPluginResource is the extended resource the simulated GPU device plugin advertises on nodes
// it owns.
const GPUPluginResource = "gpu.sim.devicewarden.io/gpu"

// Ownership: both simulated GPU drivers select on the node label LabelOwner, as real DaemonSets
// would, and a node's annotations say what hardware it has and how the drivers misbehave on it.
const (
	LabelOwner  = rolloutplan.DefaultOwnerLabel
	OwnerPlugin = "plugin"
	OwnerDRA    = "dra"
	// LabelPool names a simulated node pool (the unit a rollout phase selects).
	LabelPool = "devicewarden.io/pool"
	// AnnotationGPUs is how many GPUs the node has.
	AnnotationGPUs = "sim.devicewarden.io/gpus"
	// AnnotationShared makes the DRA driver publish shared devices (consumable memory).
	AnnotationShared = "sim.devicewarden.io/shared"
	// Misbehaviour: publish slices only this long after the node is labelled for DRA; publish this
	// many devices fewer than the node has; publish slices whatever the label says.
	AnnotationPublishDelay = "sim.devicewarden.io/publish-delay"
	AnnotationDrift        = "sim.devicewarden.io/drift"
	AnnotationIgnoreLabel  = "sim.devicewarden.io/ignore-label"
)

// PoolOptions describe a simulated node pool whose GPUs the plugin owns until a rollout moves it.
type PoolOptions struct {
	Pool   string
	Count  int
	GPUs   int
	Shared bool
	// Unenforced: the driver publishes shared devices but does not hold tenants to their shares.
	Unenforced bool
	// DriverVersion is the driverVersion attribute of the node's devices ("" for none); NodeType
	// the node's instance-type label ("" for none).
	DriverVersion string
	NodeType      string
}

// LabelNodeType is the well-known node label of a node's instance type.
const LabelNodeType = "node.kubernetes.io/instance-type"

// CreatePool creates kwok nodes <pool>-<i> labelled for the pool and owned by the device plugin,
// with no ResourceSlice: the ownership drivers (OwnedDrivers) publish what the label says.
func CreatePool(ctx context.Context, cs kubernetes.Interface, o PoolOptions) ([]string, error) {
	var names []string
	for i := 0; i < o.Count; i++ {
		name := NodeName(o.Pool, i)
		node := kwokNode(name)
		node.Labels[LabelPool], node.Labels[LabelOwner] = o.Pool, OwnerPlugin
		node.Annotations[AnnotationGPUs] = strconv.Itoa(o.GPUs)
		if o.Shared {
			node.Annotations[AnnotationShared] = "true"
		}
		if o.Unenforced {
			node.Annotations[AnnotationUnenforced] = "true"
		}
		if o.DriverVersion != "" {
			node.Annotations[AnnotationDriverVersion] = o.DriverVersion
		}
		if o.NodeType != "" {
			node.Labels[LabelNodeType] = o.NodeType
		}
		if err := ensureNode(ctx, cs, node); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// OwnedDrivers plays a GPU device plugin and a DRA driver that both follow the ownership label:
// the plugin advertises GPUPluginResource in the status of nodes labelled plugin, the DRA driver
// publishes a ResourceSlice for nodes labelled dra. Each reacts within Poll.
type OwnedDrivers struct {
	Kube kubernetes.Interface
	// Poll is how often nodes are looked at (default 250 ms).
	Poll   time.Duration
	Logger *slog.Logger

	draSince map[string]time.Time
}

// Run keeps the drivers in step with the labels until ctx ends.
func (o *OwnedDrivers) Run(ctx context.Context) error {
	poll := o.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	o.draSince = map[string]time.Time{}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if err := o.sync(ctx, time.Now()); err != nil && ctx.Err() == nil {
			logger.Warn("sim drivers: sync", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (o *OwnedDrivers) sync(ctx context.Context, now time.Time) error {
	nodes, err := o.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelPool + "," + LabelSimNode})
	if err != nil {
		return err
	}
	// One list of the driver's slices per look, rather than a read (or a delete) per node.
	slices, err := o.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.driver", Driver).String()})
	if err != nil {
		return err
	}
	published := map[string]*resourcev1.ResourceSlice{}
	for i := range slices.Items {
		published[slices.Items[i].Name] = &slices.Items[i]
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		gpus, err := strconv.Atoi(n.Annotations[AnnotationGPUs])
		if err != nil {
			continue // not a pool node
		}
		if err := o.plugin(ctx, n, gpus); err != nil {
			return err
		}
		if err := o.dra(ctx, n, gpus, published[SliceName(n.Name)], now); err != nil {
			return err
		}
	}
	return nil
}

// plugin advertises the node's GPUs while the label says plugin, and none otherwise, as kubelet
// does when a device plugin comes and goes.
func (o *OwnedDrivers) plugin(ctx context.Context, n *corev1.Node, gpus int) error {
	want := int64(0)
	if n.Labels[LabelOwner] == OwnerPlugin {
		want = int64(gpus)
	}
	have, ok := n.Status.Allocatable[GPUPluginResource]
	if ok && have.Value() == want || !ok && want == 0 {
		return nil
	}
	var v any = strconv.FormatInt(want, 10)
	if want == 0 {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"capacity": map[string]any{GPUPluginResource: v}, "allocatable": map[string]any{GPUPluginResource: v}}})
	if _, err := o.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("advertise %s on %s: %w", GPUPluginResource, n.Name, err)
	}
	return nil
}

// dra publishes the node's slice while the label says dra (after the node's publish delay), with
// the node's drift, and deletes it otherwise; have is the node's slice as published (nil: none).
func (o *OwnedDrivers) dra(ctx context.Context, n *corev1.Node, gpus int, have *resourcev1.ResourceSlice, now time.Time) error {
	publish := n.Labels[LabelOwner] == OwnerDRA || n.Annotations[AnnotationIgnoreLabel] == "true"
	if !publish {
		delete(o.draSince, n.Name)
		if have == nil {
			return nil
		}
		err := o.Kube.ResourceV1().ResourceSlices().Delete(ctx, have.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("withdraw slice of %s: %w", n.Name, err)
		}
		return nil
	}
	since, ok := o.draSince[n.Name]
	if !ok {
		since = now
		o.draSince[n.Name] = now
	}
	if d, err := time.ParseDuration(n.Annotations[AnnotationPublishDelay]); err == nil && now.Sub(since) < d {
		return nil
	}
	drift, _ := strconv.Atoi(n.Annotations[AnnotationDrift])
	want := nodeSlice(n.Name, max(gpus-drift, 0), n.Annotations[AnnotationShared] == "true")
	withDriverVersion(want, n.Annotations[AnnotationDriverVersion])
	if have == nil {
		_, err := o.Kube.ResourceV1().ResourceSlices().Create(ctx, want, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("publish slice of %s: %w", n.Name, err)
		}
		return nil
	}
	if len(have.Spec.Devices) == len(want.Spec.Devices) && sharedOf(have) == sharedOf(want) && driverVersionOf(have) == driverVersionOf(want) {
		return nil
	}
	want.ResourceVersion = have.ResourceVersion
	want.Annotations = have.Annotations // the fault state lives there
	want.Spec.Pool.Generation = have.Spec.Pool.Generation + 1
	if _, err := o.Kube.ResourceV1().ResourceSlices().Update(ctx, want, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("republish slice of %s: %w", n.Name, err)
	}
	return nil
}

func sharedOf(s *resourcev1.ResourceSlice) bool {
	return len(s.Spec.Devices) > 0 && s.Spec.Devices[0].AllowMultipleAllocations != nil && *s.Spec.Devices[0].AllowMultipleAllocations
}

// AttrDriverVersion is the attribute a simulated device publishes its driver's version in.
const AttrDriverVersion = "driverVersion"

// withDriverVersion gives every device of the slice the driver version v ("" leaves none).
func withDriverVersion(s *resourcev1.ResourceSlice, v string) {
	if v == "" {
		return
	}
	for i := range s.Spec.Devices {
		s.Spec.Devices[i].Attributes[AttrDriverVersion] = resourcev1.DeviceAttribute{VersionValue: ptr.To(v)}
	}
}

func driverVersionOf(s *resourcev1.ResourceSlice) string {
	if len(s.Spec.Devices) == 0 {
		return ""
	}
	return ptr.Deref(s.Spec.Devices[0].Attributes[AttrDriverVersion].VersionValue, "")
}
