package slackapp

import (
	"context"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/workflows"
)

// TemporalDecider delivers decisions as updates to the device's workflow.
type TemporalDecider struct {
	Client client.Client
}

// Decide sends the command and returns the workflow's answer (or its refusal).
func (d TemporalDecider) Decide(ctx context.Context, id device.ID, cmd policy.Command) (policy.CommandResult, error) {
	return workflows.SendCommand(ctx, d.Client, id, cmd, nil)
}
