package slackapp

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// TemporalDecider delivers decisions as updates to the device's workflow.
type TemporalDecider struct {
	Client client.Client
}

// Decide sends the command and returns the workflow's answer (or its refusal).
func (d TemporalDecider) Decide(ctx context.Context, id device.ID, cmd devicemsg.Command) (devicemsg.CommandResult, error) {
	return api.SendCommand(ctx, d.Client, id, cmd, nil)
}

// ApproveRollout sends the approve-phase update and summarises the rollout's answer.
func (d TemporalDecider) ApproveRollout(ctx context.Context, name string, cmd rolloutplan.Command) (string, error) {
	st, err := api.SendRolloutCommand(ctx, d.Client, name, api.UpdateRolloutApprove, cmd)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (phase %d, step %s)", st.State, st.Phase+1, st.Step), nil
}
