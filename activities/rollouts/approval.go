package rollouts

import (
	"context"
	"log/slog"

	"github.com/devicewarden/devicewarden/internal/notify"
)

// RequestRolloutApproval posts the request; without an Approver the phase waits for the CLI.
func (a *Activities) RequestRolloutApproval(ctx context.Context, in notify.RolloutApprovalRequest) error {
	slog.Default().InfoContext(ctx, "rollout waits for approval", "rollout", in.Rollout, "phase", in.Phase, "workflow", in.WorkflowID,
		"how", "devicewarden rollout approve "+in.Rollout+" "+in.Phase+" --actor <you>")
	if a.Approvals == nil {
		return nil
	}
	return a.Approvals.RequestRolloutApproval(ctx, in)
}
