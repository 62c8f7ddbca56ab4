// Package remediation holds the activities that fence a failed device and give it back: its
// DeviceTaintRules, probe and canary checks, the circuit breaker's permits, alerts, approval
// requests and the Events that say what was decided and why.
package remediation

import (
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Activities fence and release devices: DeviceTaintRules, probe and canary checks, the breaker's
// permits, alerts, approval requests and the Events that record each decision. The worker builds
// it once.
type Activities struct {
	Kube kubernetes.Interface
	// Metrics may be nil in unit tests.
	Metrics *metrics.Metrics
	// Breaker answers permit requests; BreakerConfig is the cap sent with each one.
	Breaker       BreakerClient
	BreakerConfig breaker.Config
	// NodePoolLabels name a node's pool for the node steps' permits (empty:
	// breaker.DefaultNodePoolLabels).
	NodePoolLabels []string
	// Alerter may be nil: alerts are then only logged and counted.
	Alerter notify.Alerter
	// Nodes receives device failures for node-level escalation; nil disables it.
	Nodes NodeReporter
	// DryRun makes every taint use effect None. It is read at each decision, so restarting the
	// worker without it turns the preview rules of still-failed devices into real ones.
	DryRun bool
	// Policies are the policies this worker runs under (nil: the built-in set): a device workflow
	// started without one (by `device quarantine`) takes its policy from here.
	Policies *policy.Set
	// Approvals posts release approval requests (Slack); nil means approvals come only from the CLI.
	Approvals notify.Approver
	// OwnNamespace is DeviceWarden's own namespace, where a retired device's evidence is kept
	// (default "default").
	OwnNamespace string
	// Objects creates node remediators' objects (a repair ladder's node step); nil: a client on
	// Kube's connection.
	Objects dynamic.Interface
	// CheckPoll is how often a running probe or canary heartbeats while its Pod is watched (default 5 s).
	CheckPoll time.Duration
	// SettleWait bounds how long a repair step waits for a claim no Pod uses any more to be
	// deallocated (default 30 s).
	SettleWait time.Duration
	// PeerWait bounds how long a failed reset waits for the devices it reached to be quarantined
	// by their own workflows (default 45 s).
	PeerWait time.Duration

	devices deviceCount
	held    heldAlerts
	notes   heldAlerts
}

func (a *Activities) count(result string) {
	if a.Metrics != nil {
		a.Metrics.Quarantines.WithLabelValues(result).Inc()
	}
}
