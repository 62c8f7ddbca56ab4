package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devicewarden/devicewarden/internal/capacity"
)

// CapacityInput asks for a shared-capacity check.
type CapacityInput struct {
	// Tenants restricts the classes some namespaces may claim.
	Tenants map[string][]string `json:"tenants,omitempty"`
	// Record writes the grant-time policy snapshot on allocated claims that have none yet.
	Record bool `json:"record,omitempty"`
}

// CapacityReport is what a check found.
type CapacityReport struct {
	Claims     int                  `json:"claims"`
	Devices    int                  `json:"devices"`
	Violations []capacity.Violation `json:"violations,omitempty"`
	// Recorded is how many claims got their grant snapshot in this check.
	Recorded int `json:"recorded,omitempty"`
	// Unknown are the allocations on nodes that stopped renewing their Lease and were not fenced:
	// not reclaimable, their capacity still counted as used.
	Unknown []capacity.Finding `json:"unknown,omitempty"`
}

// CheckCapacity reads every ResourceSlice and ResourceClaim, checks the shared-capacity
// invariants and sets devicewarden_capacity_violations. A share is checked against the policy its
// claim recorded when first seen; with Record, claims without a record get one now.
func (a *Activities) CheckCapacity(ctx context.Context, in CapacityInput) (CapacityReport, error) {
	sl, err := a.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return CapacityReport{}, fmt.Errorf("list resource slices: %w", err)
	}
	cl, err := a.Kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return CapacityReport{}, fmt.Errorf("list resource claims: %w", err)
	}
	ci := capacity.Input{Tenants: in.Tenants}
	rep := CapacityReport{Claims: len(cl.Items)}
	for i := range sl.Items {
		ci.Slices = append(ci.Slices, &sl.Items[i])
		rep.Devices += len(sl.Items[i].Spec.Devices)
	}
	for i := range cl.Items {
		c := &cl.Items[i]
		had, err := ci.AddClaim(c)
		if err != nil {
			return CapacityReport{}, err
		}
		if !had && in.Record {
			recorded, err := a.recordGrant(ctx, c, ci.Slices)
			if err != nil {
				return CapacityReport{}, err
			}
			if recorded {
				rep.Recorded++
			}
		}
	}
	rep.Violations = capacity.Check(ci)
	nodes, err := a.nodeStates(ctx, time.Now())
	if err != nil {
		return CapacityReport{}, err
	}
	rep.Unknown = unknownAllocations(ci.Claims, nodes)
	if a.Metrics != nil {
		for inv, n := range capacity.Counts(rep.Violations) {
			a.Metrics.CapacityViolations.WithLabelValues(inv).Set(float64(n))
		}
	}
	return rep, nil
}

func (a *Activities) recordGrant(ctx context.Context, c *resourcev1.ResourceClaim, slices []*resourcev1.ResourceSlice) (bool, error) {
	snap := capacity.Snapshot(c, slices)
	if snap == "" {
		return false, nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": c.ResourceVersion, // the allocation it describes must still be the claim's
		"annotations":     map[string]string{capacity.AnnotationGranted: snap}}})
	_, err := a.Kube.ResourceV1().ResourceClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return false, nil // changed or gone since the list: the next check records what is there then
	}
	if err != nil {
		return false, fmt.Errorf("record the grant of claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	return true, nil
}
