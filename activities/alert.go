package activities

import (
	"context"
	"log/slog"

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
}

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
