package activities

import (
	"context"
	"log/slog"

	"github.com/devicewarden/devicewarden/internal/notify"
)

// RequestRolloutApproval posts the request; without an notify.Approver the phase waits for the CLI.
func (a *Activities) RequestRolloutApproval(ctx context.Context, in notify.RolloutApprovalRequest) error {
	slog.Default().InfoContext(ctx, "rollout waits for approval", "rollout", in.Rollout, "phase", in.Phase, "workflow", in.WorkflowID,
		"how", "devicewarden rollout approve "+in.Rollout+" "+in.Phase+" --actor <you>")
	if a.Approvals == nil {
		return nil
	}
	return a.Approvals.RequestRolloutApproval(ctx, in)
}

// RequestApproval posts the request; without an notify.Approver the release waits for the CLI.
func (a *Activities) RequestApproval(ctx context.Context, in notify.ApprovalRequest) error {
	slog.Default().InfoContext(ctx, "release waits for approval", "device", in.Device.String(), "workflow", in.WorkflowID,
		"how", "devicewarden device approve|reject "+in.Device.String()+" --actor <you>")
	if a.Approvals == nil || in.Channel == "" {
		return nil
	}
	return a.Approvals.RequestApproval(ctx, in)
}
