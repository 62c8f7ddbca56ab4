package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/internal/rollout"
)

// RolloutWindowWorkflow is what a rollout's Schedule starts at each window: it opens the window on
// the rollout (starting the rollout if it is not running) and fails when the rollout is rolled
// back or blocked, so that the Schedule, created with pause-on-failure, pauses until a person looks.
func RolloutWindowWorkflow(ctx workflow.Context, in RolloutWindowInput) (activities.WindowResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 5}})
	open := activities.WindowInput{Plan: in.Plan, Until: workflow.Now(ctx).Add(in.Window.D())}
	var st activities.WindowResult
	if err := workflow.ExecuteActivity(actx, a.OpenRolloutWindow, open).Get(ctx, &st); err != nil {
		return st, fmt.Errorf("open the window of rollout %s: %w", in.Plan.Name, err)
	}
	switch st.State {
	case rollout.StateRolledBack, rollout.StateBlocked:
		return st, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("rollout %s is %s: the schedule pauses until it is resumed", in.Plan.Name, st.State), "RolloutHeld", nil)
	}
	return st, nil
}
