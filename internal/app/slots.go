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
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// SlotCheckInterval is how often the leader looks for migration slots held by migrations that
// ended without releasing them (terminated by hand, say).
const SlotCheckInterval = time.Minute

// ReleaseGoneSlots frees every migration-limiter slot whose holder is no longer running, as an
// operator's release-slot signal would, and returns the migrations it freed. A limiter that does
// not run holds nothing.
func ReleaseGoneSlots(ctx context.Context, tc client.Client) ([]string, error) {
	v, err := tc.QueryWorkflow(ctx, api.MigrationLimiterID, "", api.QueryState)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("query the migration limiter: %w", err)
	}
	var st migrationplan.SlotState
	if err := v.Get(&st); err != nil {
		return nil, fmt.Errorf("decode the migration limiter's state: %w", err)
	}
	var freed []string
	for _, h := range st.Holders {
		d, err := tc.DescribeWorkflowExecution(ctx, h.ID, "")
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return freed, fmt.Errorf("describe migration %s: %w", h.ID, err)
		case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			continue
		}
		// Named with its acquire: a new run of the same migration that acquired the slot since
		// the describe keeps it.
		if err := (&api.LimiterClient{Client: tc}).Release(ctx, migrationplan.ReleaseOf(h.ID, h.At)); err != nil {
			return freed, err
		}
		freed = append(freed, h.ID)
	}
	return freed, nil
}

// releaseGoneSlots runs ReleaseGoneSlots every SlotCheckInterval while some device has a
// workflow (a migration needs a failed device; a healthy fleet costs Temporal nothing).
func releaseGoneSlots(ctx context.Context, tc client.Client, follows func() bool, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(SlotCheckInterval):
		}
		if !follows() {
			continue
		}
		freed, err := ReleaseGoneSlots(ctx, tc)
		if err != nil && ctx.Err() == nil {
			logger.Warn("migration slots not checked", "error", err)
		}
		for _, id := range freed {
			logger.Info("migration slot freed: its migration no longer runs", "migration", id)
		}
	}
}
