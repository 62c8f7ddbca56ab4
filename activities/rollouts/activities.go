// Package rollouts holds the activities of a DRA rollout: preflight, switching a phase's nodes
// from the device plugin to DRA and back, measuring its gates, blocking new claims of a rolled-back
// phase, its window and its approval request.
package rollouts

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// Activities switch and measure rollouts. The worker builds it once.
type Activities struct {
	Kube kubernetes.Interface
	// Metrics may be nil in unit tests.
	Metrics *metrics.Metrics
	// OwnNamespace is DeviceWarden's own namespace, where gate reports and grant records live
	// (default "default").
	OwnNamespace string
	// Alerts delivers a gate's allocation-failure alerts (the remediation activities' Alert, which
	// logs, counts and hands them on); nil logs nothing more than the gate's report.
	Alerts Alerts
	// Approvals posts rollout approval requests (Slack); nil means approvals come only from the CLI.
	Approvals notify.Approver
	// Rollouts opens scheduled rollouts' windows; nil refuses them.
	Rollouts RolloutWindows
	// ProofWait bounds how long an enforcement proof waits for its devices to be published and
	// free (0: two minutes).
	ProofWait time.Duration
}

// Alerts sends one alert.
type Alerts interface {
	Alert(ctx context.Context, in notify.AlertInput) error
}

func (a *Activities) ownNamespace() string { return kubeobj.Own(a.OwnNamespace) }
