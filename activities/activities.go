// Package activities carries out DeviceWarden's side effects against Kubernetes and Slack.
package activities

import (
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Activities holds the clients every activity uses. The worker builds it once.
type Activities struct {
	Kube kubernetes.Interface
	// Metrics may be nil in unit tests.
	Metrics *metrics.Metrics
	// Breaker answers permit requests; BreakerConfig is the cap sent with each one.
	Breaker       BreakerClient
	BreakerConfig policy.BreakerConfig
	// notify.Alerter may be nil: alerts are then only logged and counted.
	Alerter notify.Alerter
	// Nodes receives device failures for node-level escalation; nil disables it.
	Nodes NodeReporter
	// DryRun makes every taint use effect None. It is read at each decision, so restarting the
	// worker without it turns the preview rules of still-failed devices into real ones.
	DryRun bool
	// KeepLeakedClaims: this worker deletes no leaked claim (its --hygiene-delete-leaked is off).
	// Read at each look, so turning the setting off and restarting stops the claim-hygiene
	// workflows already running, whose input still says they may delete.
	KeepLeakedClaims bool
	// Approvals posts release approval requests (Slack); nil means approvals come only from the CLI.
	Approvals notify.Approver
	// OwnNamespace is DeviceWarden's own namespace: migration Leases and evidence ConfigMaps live
	// there, never in a tenant's (default "default").
	OwnNamespace string
	// Limiter queues migrations for the per-node and cluster-wide caps.
	Limiter MigrationLimiter
	// Rollouts opens scheduled rollouts' windows; nil refuses them.
	Rollouts RolloutWindows
	// MigratePoll is how often migration waits look again (default 250 ms).
	MigratePoll time.Duration
	// CheckPoll is how often a running probe or canary heartbeats while its Pod is watched (default 5 s).
	CheckPoll time.Duration

	devices deviceCount
	held    heldAlerts
	notes   heldAlerts
}

func (a *Activities) count(result string) {
	if a.Metrics != nil {
		a.Metrics.Quarantines.WithLabelValues(result).Inc()
	}
}
