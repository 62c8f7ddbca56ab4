package activities

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"

	corev1 "k8s.io/api/core/v1"

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

// EventNodeEscalated is the reason of the Event on a node whose device failures escalated.
const EventNodeEscalated = "DeviceFailuresOnNode"

// Alerter delivers alerts to people (Slack, a pager). Nil means log only.
type Alerter interface {
	Alert(ctx context.Context, in AlertInput) error
}

// Alert logs the alert and hands it to the configured Alerter.
func (a *Activities) Alert(ctx context.Context, in AlertInput) error {
	attrs := []any{"level", in.Level, "text", in.Text, "workflow", in.WorkflowID}
	if in.Device.Valid() { // fleet-wide alerts (the breaker, a node) name no device
		attrs = append(attrs, "device", in.Device.String())
	}
	slog.Default().Log(ctx, alertLevel(in.Level), "alert", attrs...)
	if a.Metrics != nil {
		a.Metrics.Alerts.WithLabelValues(in.Level).Inc()
	}
	if in.Node != "" && a.Kube != nil {
		// Named after the node and the text, so a retried alert writes one Event.
		h := fnv.New64a()
		_, _ = h.Write([]byte(in.Text))
		ref := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: in.Node}
		a.event(ctx, ref, EventNodeEscalated, corev1.EventTypeWarning, in.Text, fmt.Sprintf("%s.escalated.%x", in.Node, h.Sum64()))
	}
	if a.Alerter == nil {
		return nil
	}
	return a.Alerter.Alert(ctx, in)
}

func alertLevel(level string) slog.Level {
	switch level {
	case "critical":
		return slog.LevelError
	case "warning":
		return slog.LevelWarn
	}
	return slog.LevelInfo
}
