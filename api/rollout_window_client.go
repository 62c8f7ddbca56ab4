package api

import (
	"context"
	"errors"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/internal/rollout"
)

// RolloutClient opens scheduled rollouts' windows with the Temporal client.
type RolloutClient struct {
	Client client.Client
}

// OpenWindow signals-with-start the rollout, then reads where it stands.
func (r *RolloutClient) OpenWindow(ctx context.Context, in rollout.WindowInput) (rollout.WindowResult, error) {
	err := OpenRolloutWindow(ctx, r.Client, in.Plan, in.Until)
	if errors.Is(err, ErrRolloutEnded) {
		state, err := EndedRollout(ctx, r.Client, in.Plan.Name)
		return rollout.WindowResult{State: state, Ended: true}, err
	}
	if err != nil {
		return rollout.WindowResult{}, err
	}
	v, err := r.Client.QueryWorkflow(ctx, RolloutID(in.Plan.Name), "", QueryState)
	if err != nil {
		return rollout.WindowResult{}, err
	}
	var st RolloutStatus
	if err := v.Get(&st); err != nil {
		return rollout.WindowResult{}, err
	}
	res := rollout.WindowResult{State: st.State}
	if st.Phase < len(in.Plan.Phases) {
		res.Phase = in.Plan.Phases[st.Phase].Name
	}
	return res, nil
}
