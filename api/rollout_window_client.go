package api

import (
	"context"
	"errors"

	"go.temporal.io/sdk/client"
)

// RolloutClient opens scheduled rollouts' windows with the Temporal client.
type RolloutClient struct {
	Client client.Client
}

// OpenWindow signals-with-start the rollout, then reads where it stands.
func (r *RolloutClient) OpenWindow(ctx context.Context, in OpenWindowInput) (OpenWindowResult, error) {
	err := OpenRolloutWindow(ctx, r.Client, in.Plan, in.Until)
	if errors.Is(err, ErrRolloutEnded) {
		state, err := EndedRollout(ctx, r.Client, in.Plan.Name)
		return OpenWindowResult{State: state, Ended: true}, err
	}
	if err != nil {
		return OpenWindowResult{}, err
	}
	v, err := r.Client.QueryWorkflow(ctx, RolloutID(in.Plan.Name), "", QueryState)
	if err != nil {
		return OpenWindowResult{}, err
	}
	var st RolloutStatus
	if err := v.Get(&st); err != nil {
		return OpenWindowResult{}, err
	}
	res := OpenWindowResult{State: st.State}
	if st.Phase < len(in.Plan.Phases) {
		res.Phase = in.Plan.Phases[st.Phase].Name
	}
	return res, nil
}
