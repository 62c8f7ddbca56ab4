package remediation

import (
	"context"
	"log/slog"

	"github.com/devicewarden/devicewarden/internal/notify"
)

// RequestApproval posts the request; without an Approver the release waits for the CLI.
func (a *Activities) RequestApproval(ctx context.Context, in notify.ApprovalRequest) error {
	slog.Default().InfoContext(ctx, "release waits for approval", "device", in.Device.String(), "workflow", in.WorkflowID,
		"how", "devicewarden device approve|reject "+in.Device.String()+" --actor <you>")
	if a.Approvals == nil || in.Channel == "" {
		return nil
	}
	return a.Approvals.RequestApproval(ctx, in)
}
