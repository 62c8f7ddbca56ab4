package capacity

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Finding kinds of claim hygiene.
const (
	// FindingNone: nothing to do.
	FindingNone = ""
	// FindingLeaked: allocated, reserved for no Pod, past the leak timeout.
	FindingLeaked = "leaked"
	// FindingStuck: allocated for a Pod that has not started past the stuck timeout.
	FindingStuck = "stuck"
	// FindingNodeLost: the allocation's node stopped renewing its Lease and no operator fenced it:
	// its devices' state is Unknown and nothing on it is reclaimed or counted free.
	FindingNodeLost = "node-lost"
)

// AnnotationFenced on a Node says an operator confirmed it is down for good (value: who, when):
// hygiene may reclaim what was allocated there.
const AnnotationFenced = "devicewarden.io/fenced"

// HygienePolicy says when a claim is a finding and what may be done about it.
type HygienePolicy struct {
	LeakTimeout  time.Duration `json:"leakTimeout"`
	StuckTimeout time.Duration `json:"stuckTimeout"`
	// DeleteLeaked deletes a leaked claim that was generated from a template for a Pod that is gone.
	DeleteLeaked bool `json:"deleteLeaked,omitempty"`
}

// NodeState is what hygiene knows of a node.
type NodeState struct {
	// Lost: its Lease expired; Fenced: an operator confirmed it.
	Lost, Fenced bool
}

// Finding is one claim's hygiene verdict.
type Finding struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Claim     string `json:"claim"`
	UID       string `json:"uid"`
	// Version is the claim's resourceVersion: an action is taken only on this version.
	Version string `json:"version"`
	Node    string `json:"node,omitempty"`
	// ShareIDs are the claim's shares (kept in every report, never dropped).
	ShareIDs []string `json:"shareIDs,omitempty"`
	Reason   string   `json:"reason"`
	// Deletable: a leaked claim made from a template for a Pod that is gone, and the policy allows it.
	Deletable bool `json:"deletable,omitempty"`
}

// Scan is the shape of a claim scan: list the claims, Inspect each under a policy at a time. The
// hygiene activity implements it (this package reads nothing); the app and the benchmark take it.
type Scan func(context.Context, HygienePolicy, time.Time) ([]Finding, error)

// Inspect classifies one claim. allocatedAt is when it was allocated (its managed-fields time),
// pods what is known of the Pods involved, by UID: a nil entry is a Pod looked up and gone (or
// replaced under a new UID), a missing one is unknown and counts as present. nodes are the nodes
// by name; a node missing from it is not lost (one deleted from the API is gone for good).
func Inspect(c *resourcev1.ResourceClaim, allocatedAt time.Time, pods map[types.UID]*corev1.Pod, nodes map[string]NodeState, p HygienePolicy, now time.Time) Finding {
	f := Finding{Namespace: c.Namespace, Claim: c.Name, UID: string(c.UID), Version: c.ResourceVersion}
	if c.Status.Allocation == nil || c.DeletionTimestamp != nil {
		return f
	}
	f.ShareIDs = ShareIDs(c.Status.Allocation)
	f.Node = AllocationNode(c.Status.Allocation)
	if n := nodes[f.Node]; n.Lost && !n.Fenced {
		f.Kind, f.Reason = FindingNodeLost, fmt.Sprintf("node %s stopped renewing its Lease: the allocation is Unknown until the node returns or is fenced", f.Node)
		return f
	}
	age := now.Sub(allocatedAt)
	consumed := slices.ContainsFunc(c.Status.ReservedFor, func(ref resourcev1.ResourceClaimConsumerReference) bool {
		pod, looked := pods[ref.UID]
		return !looked || pod != nil || ref.Resource != "pods"
	})
	if !consumed {
		if age < p.LeakTimeout {
			return f
		}
		f.Kind, f.Reason = FindingLeaked, fmt.Sprintf("allocated %s ago and reserved for no Pod", age.Round(time.Second))
		if len(c.Status.ReservedFor) > 0 {
			f.Reason = fmt.Sprintf("allocated %s ago and reserved only for Pods that are gone", age.Round(time.Second))
		}
		if template, owner := generatedFor(c); template && p.DeleteLeaked {
			if pod, looked := pods[owner]; owner == "" || (looked && pod == nil) {
				f.Deletable = true
				f.Reason += "; made from a template for a Pod that is gone"
			}
		}
		return f
	}
	for _, ref := range c.Status.ReservedFor {
		pod := pods[ref.UID]
		if pod == nil || started(pod) || age < p.StuckTimeout {
			continue
		}
		f.Kind, f.Reason = FindingStuck, fmt.Sprintf("Pod %s/%s has not started %s after the allocation", pod.Namespace, pod.Name, age.Round(time.Second))
		return f
	}
	return f
}

// generatedFor says whether a claim was made from a template for a Pod, and that Pod's UID (""
// when the owner reference is gone: the Pod was deleted with its dependents orphaned).
func generatedFor(c *resourcev1.ResourceClaim) (bool, types.UID) {
	if _, ok := c.Annotations["resource.kubernetes.io/pod-claim-name"]; !ok {
		return false, ""
	}
	for _, o := range c.OwnerReferences {
		if o.Kind == "Pod" {
			return true, o.UID
		}
	}
	return true, ""
}

// PodsToLook are the Pods Inspect needs to know about for a claim: its consumers and, for a
// claim made from a template, the Pod it was made for.
func PodsToLook(c *resourcev1.ResourceClaim) []corev1.ObjectReference {
	var out []corev1.ObjectReference
	for _, ref := range c.Status.ReservedFor {
		if ref.Resource == "pods" {
			out = append(out, corev1.ObjectReference{Namespace: c.Namespace, Name: ref.Name, UID: ref.UID})
		}
	}
	for _, o := range c.OwnerReferences {
		if o.Kind == "Pod" && o.UID != "" && !slices.ContainsFunc(out, func(r corev1.ObjectReference) bool { return r.UID == o.UID }) {
			out = append(out, corev1.ObjectReference{Namespace: c.Namespace, Name: o.Name, UID: o.UID})
		}
	}
	return out
}

func started(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Running != nil || s.State.Terminated != nil {
			return true
		}
	}
	return false
}

// ShareIDs are the ShareIDs of an allocation's shares, in result order (nil when it has none).
func ShareIDs(a *resourcev1.AllocationResult) []string {
	var out []string
	for _, r := range a.Devices.Results {
		if r.ShareID != nil {
			out = append(out, string(*r.ShareID))
		}
	}
	return out
}

// AllocationNode is the node a node-local allocation is pinned to ("" when it is not).
func AllocationNode(a *resourcev1.AllocationResult) string {
	if a.NodeSelector == nil {
		return ""
	}
	for _, t := range a.NodeSelector.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}
