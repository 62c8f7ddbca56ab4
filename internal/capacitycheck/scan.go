package capacitycheck

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// Scan finds the claims that need claim hygiene, for the scanner that starts a workflow per
// finding. It is cheap on a healthy cluster: one list of claims and, only when some allocation is
// old enough to be a finding, one of nodes and their Leases and one of the Pods still Pending
// (all from the apiserver's cache). Only the Pods a leaked template claim was made for are read
// one by one. A consumer that is not Pending counts as present here; the workflow looks at every
// consumer before it acts.
func Scan(ctx context.Context, kube kubernetes.Interface, pol capacity.HygienePolicy, now time.Time) ([]capacity.Finding, error) {
	list, err := kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	oldest := min(pol.LeakTimeout, pol.StuckTimeout)
	var candidates []*resourcev1.ResourceClaim
	for i := range list.Items {
		c := &list.Items[i]
		if c.Status.Allocation != nil && c.DeletionTimestamp == nil && now.Sub(AllocatedSince(c)) >= oldest {
			candidates = append(candidates, c)
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	nodes, err := NodeStates(ctx, kube, now)
	if err != nil {
		return nil, err
	}
	pending, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0", FieldSelector: "status.phase=Pending"})
	if err != nil {
		return nil, fmt.Errorf("list pending pods: %w", err)
	}
	pods := make(map[types.UID]*corev1.Pod, len(pending.Items))
	for i := range pending.Items {
		pods[pending.Items[i].UID] = &pending.Items[i]
	}
	var out []capacity.Finding
	for _, c := range candidates {
		if len(c.Status.ReservedFor) == 0 {
			if err := LookPods(ctx, kube, c, pods); err != nil {
				return nil, err
			}
		}
		if f := capacity.Inspect(c, AllocatedSince(c), pods, nodes, pol, now); f.Kind != capacity.FindingNone {
			out = append(out, f)
		}
	}
	return out, nil
}

// LookPods reads the Pods a claim's finding depends on (its consumers and the Pod a template
// claim was made for) into pods, unless already there: nil when gone or replaced by a Pod of
// the same name.
func LookPods(ctx context.Context, kube kubernetes.Interface, c *resourcev1.ResourceClaim, pods map[types.UID]*corev1.Pod) error {
	for _, ref := range capacity.PodsToLook(c) {
		if _, known := pods[ref.UID]; known {
			continue
		}
		pod, err := kube.CoreV1().Pods(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			pods[ref.UID] = nil
		case err != nil:
			return fmt.Errorf("get pod %s/%s: %w", ref.Namespace, ref.Name, err)
		case pod.UID != ref.UID:
			pods[ref.UID] = nil
		default:
			pods[ref.UID] = pod
		}
	}
	return nil
}

// AllocatedSince is when the claim was allocated (its creation when the managed fields do not say).
func AllocatedSince(c *resourcev1.ResourceClaim) time.Time {
	if at := kubeobj.AllocatedAt(c); at != nil {
		return *at
	}
	return c.CreationTimestamp.Time
}
