package hygiene

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/capacitycheck"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// HygieneInput names one claim for claim hygiene.
type HygieneInput struct {
	Namespace string                 `json:"namespace"`
	Claim     string                 `json:"claim"`
	UID       string                 `json:"uid"`
	Policy    capacity.HygienePolicy `json:"policy"`
}

// ClaimCheck is one claim looked at afresh.
type ClaimCheck struct {
	// Finding is what is wrong now (Kind "" when nothing is).
	Finding capacity.Finding `json:"finding"`
	// Gone: the claim was deleted (or replaced under a new UID).
	Gone bool `json:"gone,omitempty"`
	// Deleted: this call deleted it.
	Deleted bool `json:"deleted,omitempty"`
}

// InspectClaim looks at one claim, its Pods and its node afresh.
func (a *Activities) InspectClaim(ctx context.Context, in HygieneInput) (ClaimCheck, error) {
	c, gone, err := a.claimByUID(ctx, in)
	if err != nil || gone {
		return ClaimCheck{Gone: gone}, err
	}
	f, err := a.inspect(ctx, c, a.hygienePolicy(in.Policy), time.Now())
	return ClaimCheck{Finding: f}, err
}

// hygienePolicy is a workflow's hygiene policy as this worker applies it now: with this
// worker's deletions turned off (KeepLeakedClaims), no claim is deletable, whatever the policy the
// workflow was started with said.
func (a *Activities) hygienePolicy(p capacity.HygienePolicy) capacity.HygienePolicy {
	if a.KeepLeakedClaims {
		p.DeleteLeaked = false
	}
	return p
}

// DeleteLeakedClaim deletes a claim only if, looked at afresh, it is still a leak that may be
// deleted, and only at the UID and resourceVersion it was looked at: a claim that changed in
// between is looked at again on the activity's retry. A claim already gone is not an error, so a
// retried or repeated call deletes at most once.
func (a *Activities) DeleteLeakedClaim(ctx context.Context, in HygieneInput) (ClaimCheck, error) {
	c, gone, err := a.claimByUID(ctx, in)
	if err != nil || gone {
		return ClaimCheck{Gone: gone}, err
	}
	f, err := a.inspect(ctx, c, a.hygienePolicy(in.Policy), time.Now())
	if err != nil || !f.Deletable || a.DryRun {
		return ClaimCheck{Finding: f}, err
	}
	uid, version := c.UID, c.ResourceVersion
	err = a.Kube.ResourceV1().ResourceClaims(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &version}})
	switch {
	case apierrors.IsNotFound(err):
		return ClaimCheck{Gone: true}, nil
	case err != nil:
		return ClaimCheck{}, fmt.Errorf("delete claim %s/%s at version %s: %w", c.Namespace, c.Name, version, err)
	}
	if a.Metrics != nil {
		a.Metrics.ClaimsDeleted.Inc()
	}
	a.claimEvent(ctx, c, f, kubeobj.EventLeakedClaimDeleted, "deleted", corev1.EventTypeNormal,
		fmt.Sprintf("deleted at version %s (shares %s): %s", version, strings.Join(f.ShareIDs, ","), f.Reason))
	return ClaimCheck{Finding: f, Deleted: true}, nil
}

// RecordClaimFinding writes a Warning Event on the claim: once per claim and kind, however often
// it is retried (the Event's name is fixed).
func (a *Activities) RecordClaimFinding(ctx context.Context, f capacity.Finding) error {
	reason := map[string]string{capacity.FindingLeaked: kubeobj.EventClaimLeaked, capacity.FindingStuck: kubeobj.EventClaimShareStuck, capacity.FindingNodeLost: kubeobj.EventClaimUnknown}[f.Kind]
	if reason == "" {
		return fmt.Errorf("no event for finding kind %q", f.Kind)
	}
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: f.Claim, UID: types.UID(f.UID), ResourceVersion: f.Version}}
	shares := "none"
	if len(f.ShareIDs) > 0 {
		shares = strings.Join(f.ShareIDs, ",")
	}
	return a.claimEvent(ctx, c, f, reason, f.Kind, corev1.EventTypeWarning, fmt.Sprintf("%s (version %s, shares %s)", f.Reason, f.Version, shares))
}

// claimEvent writes an Event on a claim named after the claim's UID and a key, so it is written
// once; an Event already there is success.
func (a *Activities) claimEvent(ctx context.Context, c *resourcev1.ResourceClaim, f capacity.Finding, reason, key, typ, msg string) error {
	ref := corev1.ObjectReference{Kind: "ResourceClaim", APIVersion: resourcev1.SchemeGroupVersion.String(),
		Namespace: c.Namespace, Name: c.Name, UID: c.UID, ResourceVersion: f.Version}
	err := kubeobj.CreateEvent(ctx, a.Kube, ref, reason, typ, msg, fmt.Sprintf("%s.hygiene-%s", c.UID, key), "devicewarden.io/claim-hygiene")
	if err != nil {
		if reason == kubeobj.EventLeakedClaimDeleted {
			slog.Default().Warn("event not recorded", "claim", c.Namespace+"/"+c.Name, "reason", reason, "error", err)
			return nil // the deletion happened; its record is the workflow's history
		}
		return fmt.Errorf("record %s on claim %s/%s: %w", reason, c.Namespace, c.Name, err)
	}
	return nil
}

// claimByUID reads the claim; gone when it was deleted or replaced under a new UID.
func (a *Activities) claimByUID(ctx context.Context, in HygieneInput) (*resourcev1.ResourceClaim, bool, error) {
	c, err := a.Kube.ResourceV1().ResourceClaims(in.Namespace).Get(ctx, in.Claim, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("get claim %s/%s: %w", in.Namespace, in.Claim, err)
	case string(c.UID) != in.UID:
		return nil, true, nil
	}
	return c, false, nil
}

// inspect looks up the Pods and node one claim's finding depends on, then classifies it.
func (a *Activities) inspect(ctx context.Context, c *resourcev1.ResourceClaim, pol capacity.HygienePolicy, now time.Time) (capacity.Finding, error) {
	pods := map[types.UID]*corev1.Pod{}
	if err := capacitycheck.LookPods(ctx, a.Kube, c, pods); err != nil {
		return capacity.Finding{}, err
	}
	nodes := map[string]capacity.NodeState{}
	if c.Status.Allocation != nil {
		if name := capacity.AllocationNode(c.Status.Allocation); name != "" {
			st, known, err := a.nodeState(ctx, name, now)
			if err != nil {
				return capacity.Finding{}, err
			}
			if known {
				nodes[name] = st
			}
		}
	}
	return capacity.Inspect(c, capacitycheck.AllocatedSince(c), pods, nodes, pol, now), nil
}

// nodeState reads one node and its heartbeat Lease (known: the node exists).
func (a *Activities) nodeState(ctx context.Context, name string, now time.Time) (capacity.NodeState, bool, error) {
	n, err := a.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return capacity.NodeState{}, false, nil
	}
	if err != nil {
		return capacity.NodeState{}, false, fmt.Errorf("get node %s: %w", name, err)
	}
	l, err := a.Kube.CoordinationV1().Leases(capacitycheck.NodeLeaseNamespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		l = nil
	case err != nil:
		return capacity.NodeState{}, false, fmt.Errorf("get lease of node %s: %w", name, err)
	}
	return capacitycheck.StateOf(n, l, now), true, nil
}
