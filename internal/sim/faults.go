package sim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/device"
)

// AnnotationFaults holds the simulated driver's fault state on the pool's ResourceSlice: a JSON
// object from device name to "<health>: <message>". A faulty device fails every Pod that runs on
// it (the probe and canary included) until `sim health --health Healthy` fixes it.
const AnnotationFaults = "sim.devicewarden.io/faults"

// Fault is a device's simulated fault.
type Fault struct {
	Health  corev1.ResourceHealthStatus `json:"health"`
	Message string                      `json:"message,omitempty"`
	// Kind says what clears it: a reset (FaultTransient), a node reboot (FaultReboot), nothing
	// (FaultPermanent). None: only `sim health --health Healthy`.
	Kind string `json:"kind,omitempty"`
}

// The kinds of fault the simulated driver plays.
const (
	FaultTransient = "transient"
	FaultReboot    = "reboot"
	FaultPermanent = "permanent"
)

// FaultKinds are the kinds `sim health --fault` takes.
var FaultKinds = []string{FaultTransient, FaultReboot, FaultPermanent}

// ResetImage is the simulated driver's reset tool: a Pod with this image that runs on a faulty
// device clears a transient fault and exits 0; any other fault it leaves, and exits 1.
const ResetImage = "sim.devicewarden.io/reset"

// SetFault records the device's fault state (Healthy clears it) on its pool's slice. A fault is
// the physical GPU's: on a partitionable GPU it is set on every form of it (the whole device and
// each partition), whichever form was named.
func SetFault(ctx context.Context, cs kubernetes.Interface, id device.ID, health corev1.ResourceHealthStatus, message string) error {
	return SetFaultKind(ctx, cs, id, health, message, "")
}

// SetFaultKind is SetFault with the kind of fault, which says what clears it.
func SetFaultKind(ctx context.Context, cs kubernetes.Interface, id device.ID, health corev1.ResourceHealthStatus, message, kind string) error {
	return updateNotes(ctx, cs, id, AnnotationFaults, func(pool []resourcev1.ResourceSlice, faults map[string]Fault) bool {
		for _, d := range physicalForms(pool, id.Device) {
			if health == corev1.ResourceHealthStatusHealthy {
				delete(faults, d)
			} else {
				faults[d] = Fault{Health: health, Message: message, Kind: kind}
			}
		}
		return true
	})
}

// faultSlice is the slice of a pool that keeps the pool's faults: SliceName(pool), or the pool's
// first slice if none has that name.
func faultSlice(pool []resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	for i := range pool {
		if pool[i].Name == SliceName(pool[i].Spec.Pool.Name) {
			return &pool[i]
		}
	}
	return &pool[0]
}

// physicalForms are the pool's devices that are forms of the same physical GPU as the named one
// (they share its parentUUID), or the named device alone.
func physicalForms(pool []resourcev1.ResourceSlice, name string) []string {
	parent := ""
	for _, s := range pool {
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes[AttrParent]; ok && d.Name == name && a.StringValue != nil {
				parent = *a.StringValue
			}
		}
	}
	if parent == "" {
		return []string{name}
	}
	var out []string
	for _, s := range pool {
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes[AttrParent]; ok && a.StringValue != nil && *a.StringValue == parent {
				out = append(out, d.Name)
			}
		}
	}
	return out
}

func readFaults(s *resourcev1.ResourceSlice) map[string]Fault {
	return readNotes[Fault](s, AnnotationFaults)
}

// poolSlices are the slices that publish the device's pool.
func poolSlices(ctx context.Context, cs kubernetes.Interface, id device.ID) ([]resourcev1.ResourceSlice, error) {
	list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + id.Driver})
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	var out []resourcev1.ResourceSlice
	for i := range list.Items {
		if list.Items[i].Spec.Pool.Name == id.Pool {
			out = append(out, list.Items[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no resource slice publishes pool %s of driver %s", id.Pool, id.Driver)
	}
	return out, nil
}

// FaultOf is the device's simulated fault; false when it has none.
func FaultOf(ctx context.Context, cs kubernetes.Interface, id device.ID) (Fault, bool, error) {
	pool, err := poolSlices(ctx, cs, id)
	if err != nil {
		return Fault{}, false, err
	}
	for i := range pool {
		if f, ok := readFaults(&pool[i])[id.Device]; ok {
			return f, true, nil
		}
	}
	return Fault{}, false, nil
}
