package remediation

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"

	corev1 "k8s.io/api/core/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// Alert logs the alert and hands it to the configured notify.Alerter.
func (a *Activities) Alert(ctx context.Context, in notify.AlertInput) error {
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
		a.event(ctx, ref, kubeobj.EventNodeEscalated, corev1.EventTypeWarning, in.Text, fmt.Sprintf("%s.escalated.%x", in.Node, h.Sum64()))
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
