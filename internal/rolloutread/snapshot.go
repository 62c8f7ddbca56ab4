// Package rolloutread reads what a rollout phase's checks need from the cluster: its nodes, the
// devices its drivers publish, the claims and the tenants' Pods. The rollout activities and the
// rollout benchmark call it alike.
package rolloutread

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// Snapshot reads what phase i's checks need: its nodes, the devices its drivers publish on
// them, and (withClaims) the cluster's claims and the tenants' Pods. expected is what enable
// recorded per node (nil: unknown); own is DeviceWarden's namespace, where grant records are.
func Snapshot(ctx context.Context, kube kubernetes.Interface, own string, p rolloutplan.Plan, i int, expected map[string]int64, withClaims bool) (rolloutplan.Snapshot, error) {
	ph := p.Phases[i]
	s := rolloutplan.Snapshot{Now: time.Now()}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ph.Nodes})
	if err != nil {
		return s, fmt.Errorf("list nodes %q: %w", ph.Nodes, err)
	}
	inPhase := map[string]bool{}
	for _, n := range nodes.Items {
		inPhase[n.Name] = true
		node := rolloutplan.Node{Name: n.Name, Owner: n.Labels[p.OwnerLabel], Expected: -1}
		if q, ok := n.Status.Allocatable[corev1.ResourceName(p.PluginResource)]; ok {
			node.PluginDevices = q.Value()
		}
		if v, ok := expected[n.Name]; ok {
			node.Expected = v
		}
		s.Nodes = append(s.Nodes, node)
	}
	all, err := DriverSlices(ctx, kube, ph.Drivers())
	if err != nil {
		return s, err
	}
	var phaseSlices []*resourcev1.ResourceSlice
	for _, sl := range all {
		if sl.Spec.NodeName != nil && inPhase[*sl.Spec.NodeName] {
			s.Devices = append(s.Devices, sliceDevices(sl, inPhase)...)
			phaseSlices = append(phaseSlices, sl)
		}
	}
	if !withClaims {
		return s, nil
	}
	claims, err := kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list resource claims: %w", err)
	}
	pods := map[types.UID]*corev1.Pod{}
	for ns := range p.AllowedNamespaces(i) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return s, fmt.Errorf("list pods in %s: %w", ns, err)
		}
		for k := range list.Items {
			pod := &list.Items[k]
			pods[pod.UID] = pod
			if pend, ok := pendingOnClaims(pod); ok {
				s.Pending = append(s.Pending, pend)
			}
		}
	}
	tenants := p.AllowedNamespaces(i)
	ci := capacity.Input{Slices: phaseSlices}
	grants, err := kubeobj.GrantRecords(ctx, kube, own)
	if err != nil {
		return s, err
	}
	for k := range claims.Items {
		c := &claims.Items[k]
		s.Claims = append(s.Claims, reduceClaim(c, pods, tenants[c.Namespace]))
		if _, err := ci.AddClaim(c, grants[string(c.UID)]); err != nil {
			return s, err
		}
	}
	phaseDevices := map[string]bool{}
	for _, d := range s.Devices {
		phaseDevices[d.Driver+"/"+d.Pool+"/"+d.Name] = true
	}
	for _, v := range capacity.Check(ci) {
		if phaseDevices[v.Device] {
			s.CapacityViolations = append(s.CapacityViolations, v.String())
		}
	}
	return s, nil
}

// sliceDevices are a slice's devices when it is on a phase node.
func sliceDevices(sl *resourcev1.ResourceSlice, inPhase map[string]bool) []rolloutplan.Device {
	if sl.Spec.NodeName == nil || !inPhase[*sl.Spec.NodeName] {
		return nil
	}
	out := make([]rolloutplan.Device, 0, len(sl.Spec.Devices))
	for _, d := range sl.Spec.Devices {
		dev := rolloutplan.Device{Node: *sl.Spec.NodeName, Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Name: d.Name,
			Shared: d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations}
		if dev.Shared {
			dev.Capacity = map[string]rolloutplan.Capacity{}
			for name, c := range d.Capacity {
				dev.Capacity[string(name)] = rolloutplan.Capacity{Value: c.Value.Value(), Smallest: capacity.SmallestRequest(c.RequestPolicy)}
			}
		}
		out = append(out, dev)
	}
	return out
}

// pendingOnClaims is a Pod the scheduler could not place, when it waits for resource claims.
func pendingOnClaims(pod *corev1.Pod) (rolloutplan.PendingPod, bool) {
	if pod.Status.Phase != corev1.PodPending || len(pod.Spec.ResourceClaims) == 0 {
		return rolloutplan.PendingPod{}, false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return rolloutplan.PendingPod{Namespace: pod.Namespace, Name: pod.Name, Reason: c.Reason, Message: c.Message}, true
		}
	}
	return rolloutplan.PendingPod{}, false
}

// reduceClaim keeps what the gates read. The allocation time is when the scheduler last wrote the
// allocation (its managed-fields entry); Ready is the first consumer's Ready transition.
func reduceClaim(c *resourcev1.ResourceClaim, pods map[types.UID]*corev1.Pod, tenant bool) rolloutplan.Claim {
	out := rolloutplan.Claim{Namespace: c.Namespace, Name: c.Name, Created: c.CreationTimestamp.Time}
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil {
			out.Classes = append(out.Classes, r.Exactly.DeviceClassName)
		}
		for _, sub := range r.FirstAvailable {
			out.Classes = append(out.Classes, sub.DeviceClassName)
		}
	}
	if c.Status.Allocation == nil {
		return out
	}
	out.AllocatedAt = kubeobj.AllocatedAt(c)
	for _, r := range c.Status.Allocation.Devices.Results {
		res := rolloutplan.Result{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		if len(r.ConsumedCapacity) > 0 {
			res.Consumed = map[string]int64{}
			for name, q := range r.ConsumedCapacity {
				res.Consumed[string(name)] = q.Value()
			}
		}
		out.Results = append(out.Results, res)
	}
	for _, ref := range c.Status.ReservedFor {
		pod := pods[ref.UID]
		if pod == nil {
			continue
		}
		if t := conditionSince(pod, corev1.PodReady); t != nil && (out.ReadyAt == nil || t.Before(*out.ReadyAt)) {
			out.ReadyAt = t
		}
		// Without a managed-fields entry (an allocation written by another tool), the Pod's
		// scheduling time stands for the allocation's.
		if t := conditionSince(pod, corev1.PodScheduled); out.AllocatedAt == nil && t != nil {
			out.AllocatedAt = t
		}
	}
	if tenant && len(c.Status.ReservedFor) == 0 {
		for _, o := range c.OwnerReferences {
			if o.Kind == "Pod" && pods[o.UID] == nil {
				out.Orphaned = true
			}
		}
	}
	return out
}

// conditionSince is when the Pod's condition last turned True (nil: it is not True).
func conditionSince(pod *corev1.Pod, cond corev1.PodConditionType) *time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == cond && c.Status == corev1.ConditionTrue {
			t := c.LastTransitionTime.Time
			return &t
		}
	}
	return nil
}

// DriverSlices lists the ResourceSlices the drivers publish (checked by driver too, should a list
// ignore the field selector).
func DriverSlices(ctx context.Context, kube kubernetes.Interface, drivers []string) ([]*resourcev1.ResourceSlice, error) {
	var out []*resourcev1.ResourceSlice
	for _, drv := range drivers {
		list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.driver", drv).String()})
		if err != nil {
			return nil, fmt.Errorf("list resource slices of %s: %w", drv, err)
		}
		for i := range list.Items {
			if list.Items[i].Spec.Driver == drv {
				out = append(out, &list.Items[i])
			}
		}
	}
	return out, nil
}
