package rollouts

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/api"
)

// RolloutWindows opens windows on rollouts (package api implements it with the Temporal client:
// signal-with-start on the rollout's workflow, then its state query).
type RolloutWindows interface {
	OpenWindow(ctx context.Context, in api.OpenWindowInput) (api.OpenWindowResult, error)
}

// OpenRolloutWindow opens the window on the plan's rollout, starting it when it is not running.
func (a *Activities) OpenRolloutWindow(ctx context.Context, in api.OpenWindowInput) (api.OpenWindowResult, error) {
	if a.Rollouts == nil {
		return api.OpenWindowResult{}, temporal.NewNonRetryableApplicationError("this worker has no Temporal client for rollouts", "NoRolloutClient", errors.New("no rollout client"))
	}
	return a.Rollouts.OpenWindow(ctx, in)
}
