// Package notify holds what DeviceWarden tells people: the alerts and approval requests its
// workflows send, and the interfaces a destination (the Slack app, a pager) implements. The
// activities hand them on; the watcher alerts through the same Alerter.
package notify

import (
	"context"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// AlertInput is one alert about a device or the fleet.
type AlertInput struct {
	// Device is empty for fleet-wide alerts (the circuit breaker).
	Device     device.ID `json:"device"`
	Level      string    `json:"level"`
	Text       string    `json:"text"`
	WorkflowID string    `json:"workflowID"`
	// Channel is the policy's Slack channel ("" = the Alerter's default).
	Channel string `json:"channel,omitempty"`
	// Node names the node a node-level alert is about; the alert is then also a Warning Event
	// on that node, so `kubectl describe node` shows it.
	Node string `json:"node,omitempty"`
}

// Alerter delivers alerts to people (Slack, a pager). Nil means log only.
type Alerter interface {
	Alert(ctx context.Context, in AlertInput) error
}

// ApprovalRequest asks people to approve a device's release.
type ApprovalRequest struct {
	Device     device.ID `json:"device"`
	Node       string    `json:"node"`
	Reason     string    `json:"reason"`
	Summary    string    `json:"summary"`
	WorkflowID string    `json:"workflowID"`
	// Channel is the policy's Slack channel.
	Channel string             `json:"channel,omitempty"`
	Probe   *decide.StepResult `json:"probe,omitempty"`
	Canary  *decide.StepResult `json:"canary,omitempty"`
	// Review names the review asking (decide.Review.ID), or the repair step (repair-<try>): the
	// buttons decide on it alone.
	Review string `json:"review,omitempty"`
	// Step is the repair ladder's step that waits for approval ("" for a release).
	Step string `json:"step,omitempty"`
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
