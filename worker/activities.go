package worker

import (
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/activities/devicehistory"
	"github.com/devicewarden/devicewarden/activities/hygiene"
	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Deps are the clients and settings the activities need. Each domain gets only its own.
type Deps struct {
	Kube kubernetes.Interface
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Breaker answers permit requests (a *permits.Client); BreakerConfig is this worker's cap.
	Breaker       remediation.BreakerClient
	BreakerConfig breaker.Config
	// Nodes, Limiter and Rollouts reach the node, limiter and rollout workflows.
	Nodes    remediation.NodeReporter
	Limiter  migration.MigrationLimiter
	Rollouts rollouts.RolloutWindows
	// Alerter and Approvals may be nil: alerts are then only logged, approvals come from the CLI.
	Alerter   notify.Alerter
	Approvals notify.Approver
	// DryRun: taints preview with effect None, leaked claims are never deleted.
	DryRun bool
	// KeepLeakedClaims: this worker deletes no leaked claim.
	KeepLeakedClaims bool
	// OwnNamespace is DeviceWarden's own namespace (default "default").
	OwnNamespace string
	// NodePoolLabels name a node's pool for the node steps' permits (empty: the defaults).
	NodePoolLabels []string
	// Policies are the policies the device workflows run under (nil: the built-in set).
	Policies *policy.Set
}

// Activities are the domains' activities, registered on the workers.
type Activities struct {
	Remediation *remediation.Activities
	Migration   *migration.Activities
	Rollouts    *rollouts.Activities
	Hygiene     *hygiene.Activities
	History     *devicehistory.Activities
}

// NewActivities builds each domain's activities from d.
func NewActivities(d Deps) *Activities {
	rem := &remediation.Activities{Kube: d.Kube, Metrics: d.Metrics, Breaker: d.Breaker, BreakerConfig: d.BreakerConfig,
		Nodes: d.Nodes, Alerter: d.Alerter, Approvals: d.Approvals, DryRun: d.DryRun, OwnNamespace: d.OwnNamespace,
		NodePoolLabels: d.NodePoolLabels, Policies: d.Policies}
	return &Activities{
		Remediation: rem,
		Migration:   &migration.Activities{Kube: d.Kube, Metrics: d.Metrics, OwnNamespace: d.OwnNamespace, Limiter: d.Limiter},
		Rollouts: &rollouts.Activities{Kube: d.Kube, Metrics: d.Metrics, OwnNamespace: d.OwnNamespace, Alerts: rem,
			Approvals: d.Approvals, Rollouts: d.Rollouts},
		Hygiene: &hygiene.Activities{Kube: d.Kube, Metrics: d.Metrics, DryRun: d.DryRun, KeepLeakedClaims: d.KeepLeakedClaims,
			OwnNamespace: d.OwnNamespace},
		History: &devicehistory.Activities{Kube: d.Kube, OwnNamespace: d.OwnNamespace},
	}
}

// register registers every domain's activities on w.
func (a *Activities) register(w interface{ RegisterActivity(any) }) {
	w.RegisterActivity(a.Remediation)
	w.RegisterActivity(a.Migration)
	w.RegisterActivity(a.Rollouts)
	w.RegisterActivity(a.Hygiene)
	w.RegisterActivity(a.History)
}
