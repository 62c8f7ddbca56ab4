package rollouts

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/rollout"
)

// WindowInput opens a scheduled rollout's window until Until.
type WindowInput struct {
	Plan  rollout.Plan `json:"plan"`
	Until time.Time    `json:"until"`
}

// WindowResult is where the rollout stands once its window is open.
type WindowResult struct {
	Phase string        `json:"phase"`
	State rollout.State `json:"state"`
	// Ended: a run of the rollout had ended, and the window started none (State is how it ended).
	Ended bool `json:"ended,omitempty"`
}

// RolloutWindows opens windows on rollouts (the worker implements it with the Temporal client:
// signal-with-start on the rollout's workflow, then its state query).
type RolloutWindows interface {
	OpenWindow(ctx context.Context, in WindowInput) (WindowResult, error)
}

// OpenRolloutWindow opens the window on the plan's rollout, starting it when it is not running.
func (a *Activities) OpenRolloutWindow(ctx context.Context, in WindowInput) (WindowResult, error) {
	if a.Rollouts == nil {
		return WindowResult{}, temporal.NewNonRetryableApplicationError("this worker has no Temporal client for rollouts", "NoRolloutClient", errors.New("no rollout client"))
	}
	return a.Rollouts.OpenWindow(ctx, in)
}
