package workflows

import (
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// RolloutWindowWorkflow is what a rollout's Schedule starts at each window: it opens the window on
// the rollout (starting it if no run of it has been) and fails when the rollout is rolled back or
// blocked, or its last run ended rolled back or terminated, so that the Schedule, created with
// pause-on-failure, pauses until a person looks. After a completed run it does nothing.
func RolloutWindowWorkflow(ctx workflow.Context, in api.RolloutWindowInput) (api.OpenWindowResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 5}})
	open := api.OpenWindowInput{Plan: in.Plan, Until: workflow.Now(ctx).Add(in.Window.D())}
	var st api.OpenWindowResult
	if err := workflow.ExecuteActivity(actx, rol.OpenRolloutWindow, open).Get(ctx, &st); err != nil {
		return st, fmt.Errorf("open the window of rollout %s: %w", in.Plan.Name, err)
	}
	switch {
	case st.Ended && st.State == rolloutplan.StateCompleted:
		return st, nil // done: the window has nothing to open
	case st.Ended:
		return st, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("rollout %s ended %s: the schedule pauses; start the rollout again (devicewarden rollout start) once it is looked at", in.Plan.Name, st.State), "RolloutEnded", nil)
	case st.State == rolloutplan.StateRolledBack, st.State == rolloutplan.StateBlocked:
		return st, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("rollout %s is %s: the schedule pauses until it is resumed", in.Plan.Name, st.State), "RolloutHeld", nil)
	}
	return st, nil
}
