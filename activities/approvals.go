package activities

import (
	"context"
	"log/slog"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// ApprovalRequest asks people to approve a device's release.
type ApprovalRequest struct {
	Device     device.ID `json:"device"`
	Node       string    `json:"node"`
	Reason     string    `json:"reason"`
	Summary    string    `json:"summary"`
	WorkflowID string    `json:"workflowID"`
	// Channel is the policy's Slack channel.
	Channel string             `json:"channel,omitempty"`
	Probe   *policy.StepResult `json:"probe,omitempty"`
	Canary  *policy.StepResult `json:"canary,omitempty"`
	// Review names the review asking (policy.Review.ID): the buttons decide on it alone.
	Review string `json:"review,omitempty"`
}

// Approver posts approval requests where people can answer them (Slack buttons).
type Approver interface {
	RequestApproval(ctx context.Context, in ApprovalRequest) error
	RequestRolloutApproval(ctx context.Context, in RolloutApprovalRequest) error
}

// RolloutApprovalRequest asks people to approve going on past a rollout phase.
type RolloutApprovalRequest struct {
	Rollout string `json:"rollout"`
	Phase   string `json:"phase"`
	// Next is the phase that starts once approved.
	Next       string `json:"next"`
	Summary    string `json:"summary"`
	WorkflowID string `json:"workflowID"`
	// Channel is the plan's Slack channel ("" = the default one).
	Channel string `json:"channel,omitempty"`
}

// RequestRolloutApproval posts the request; without an Approver the phase waits for the CLI.
func (a *Activities) RequestRolloutApproval(ctx context.Context, in RolloutApprovalRequest) error {
	slog.Default().InfoContext(ctx, "rollout waits for approval", "rollout", in.Rollout, "phase", in.Phase, "workflow", in.WorkflowID,
		"how", "devicewarden rollout approve "+in.Rollout+" "+in.Phase+" --actor <you>")
	if a.Approvals == nil {
		return nil
	}
	return a.Approvals.RequestRolloutApproval(ctx, in)
}

// RequestApproval posts the request; without an Approver the release waits for the CLI.
func (a *Activities) RequestApproval(ctx context.Context, in ApprovalRequest) error {
	slog.Default().InfoContext(ctx, "release waits for approval", "device", in.Device.String(), "workflow", in.WorkflowID,
		"how", "devicewarden device approve|reject "+in.Device.String()+" --actor <you>")
	if a.Approvals == nil || in.Channel == "" {
		return nil
	}
	return a.Approvals.RequestApproval(ctx, in)
}
