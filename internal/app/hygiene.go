package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/capacity"
)

// HygieneOptions configures claim hygiene; a zero Interval turns the scanner off.
type HygieneOptions struct {
	// Interval is how often the leader scans the claims.
	Interval time.Duration
	// Recheck is how often a workflow looks at its standing finding again.
	Recheck time.Duration
	// RechecksPerRun bounds one workflow run's history (0: the workflow's default).
	RechecksPerRun int
	Policy         capacity.HygienePolicy
}

// DefaultHygiene scans every 5 minutes and only reports: a claim is leaked 30 minutes after its
// allocation with no consumer, a share stuck 30 minutes after it with its Pod not started.
func DefaultHygiene() HygieneOptions {
	return HygieneOptions{Interval: 5 * time.Minute, Recheck: time.Minute,
		Policy: capacity.HygienePolicy{LeakTimeout: 30 * time.Minute, StuckTimeout: 30 * time.Minute}}
}

// Validate checks the options of a scanner that is on.
func (o HygieneOptions) Validate() error {
	if o.Interval < 0 {
		return fmt.Errorf("claim hygiene: the interval must not be negative (0 turns it off)")
	}
	if o.Interval > 0 && (o.Recheck <= 0 || o.Policy.LeakTimeout <= 0 || o.Policy.StuckTimeout <= 0) {
		return fmt.Errorf("claim hygiene: recheck, leak timeout and stuck timeout must be positive")
	}
	return nil
}

// scanClaims looks for claim-hygiene findings every Interval and starts one workflow per claim
// UID for each; a claim whose workflow already runs is left to it. Nothing reaches Temporal
// while there is no finding.
func scanClaims(ctx context.Context, scan capacity.Scan, tc client.Client, o HygieneOptions, logger *slog.Logger) {
	for {
		findings, err := scan(ctx, o.Policy, time.Now())
		if err != nil && ctx.Err() == nil {
			logger.Warn("claim hygiene scan failed", "error", err)
		}
		for _, f := range findings {
			started, err := startHygiene(ctx, tc, f, o)
			switch {
			case err != nil && ctx.Err() == nil:
				logger.Warn("claim hygiene workflow not started", "claim", f.Namespace+"/"+f.Claim, "error", err)
			case started:
				logger.Info("claim hygiene finding", "claim", f.Namespace+"/"+f.Claim, "kind", f.Kind, "reason", f.Reason)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(o.Interval):
		}
	}
}

// startHygiene starts the claim's workflow; false when one already runs.
func startHygiene(ctx context.Context, tc client.Client, f capacity.Finding, o HygieneOptions) (bool, error) {
	_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: api.ClaimHygieneID(f.UID), TaskQueue: api.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
	}, api.ClaimHygieneWorkflow, api.ClaimHygieneInput{Finding: f, Policy: o.Policy, Recheck: o.Recheck, RechecksPerRun: o.RechecksPerRun})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return false, nil
	}
	return err == nil, err
}
