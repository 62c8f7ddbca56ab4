package hygiene

import (
	"context"
	"time"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/capacitycheck"
)

// CheckCapacity checks the shared-capacity invariants (capacitycheck.Check) and sets
// devicewarden_capacity_violations.
func (a *Activities) CheckCapacity(ctx context.Context, in capacity.CheckInput) (capacity.CheckReport, error) {
	rep, err := capacitycheck.Check(ctx, a.Kube, a.ownNamespace(), in)
	if err != nil {
		return capacity.CheckReport{}, err
	}
	if a.Metrics != nil {
		for inv, n := range capacity.Counts(rep.Violations) {
			a.Metrics.CapacityViolations.WithLabelValues(inv).Set(float64(n))
		}
	}
	return rep, nil
}

// FenceNode records an operator's confirmation that a lost node is down for good
// (capacitycheck.FenceNode).
func (a *Activities) FenceNode(ctx context.Context, in capacity.FenceInput) error {
	return capacitycheck.FenceNode(ctx, a.Kube, in)
}

// ScanClaims finds the claims that need claim hygiene (capacitycheck.Scan), for the scanner that
// starts a workflow per finding, and sets devicewarden_claim_findings.
func (a *Activities) ScanClaims(ctx context.Context, pol capacity.HygienePolicy, now time.Time) ([]capacity.Finding, error) {
	out, err := capacitycheck.Scan(ctx, a.Kube, pol, now)
	if err != nil {
		return nil, err
	}
	if a.Metrics != nil {
		counts := map[string]int{capacity.FindingLeaked: 0, capacity.FindingStuck: 0, capacity.FindingNodeLost: 0}
		for _, f := range out {
			counts[f.Kind]++
		}
		for kind, n := range counts {
			a.Metrics.ClaimFindings.WithLabelValues(kind).Set(float64(n))
		}
	}
	return out, nil
}
