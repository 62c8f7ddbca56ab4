package policy

import (
	"fmt"
	"time"
)

// Migration says whether and how jobs are moved off a quarantined (Unhealthy) device. Off by
// default: moving a tenant's job is a decision a platform team turns on per class.
type Migration struct {
	Enabled bool `json:"enabled,omitempty"`
	// PerNode and ClusterWide cap concurrent migrations (a node's jobs move one at a time by default).
	PerNode     int `json:"perNode,omitempty"`
	ClusterWide int `json:"clusterWide,omitempty"`
	// CheckpointTimeout is how long a workload has to answer a checkpoint request.
	CheckpointTimeout JSONDuration `json:"checkpointTimeout,omitempty"`
	// ReadyTimeout is how long the moved workload has to be Ready on other devices.
	ReadyTimeout JSONDuration `json:"readyTimeout,omitempty"`
	// DecisionTimeout is how long a workload that could not be moved safely waits for a person's
	// migrate-anyway or abandon before it is left where it is (its evidence kept).
	DecisionTimeout JSONDuration `json:"decisionTimeout,omitempty"`
	// EvidenceKeep is how long the evidence of a workload that could not be moved is kept.
	EvidenceKeep JSONDuration `json:"evidenceKeep,omitempty"`
	// TenantChannels are the Slack channels of tenants (namespace -> channel), told when their
	// workload could not be moved.
	TenantChannels map[string]string `json:"tenantChannels,omitempty"`
}

// DefaultMigration is what `migration: {enabled: true}` means.
func DefaultMigration() Migration {
	return Migration{PerNode: 1, ClusterWide: 10, CheckpointTimeout: JSONDuration(10 * time.Minute),
		ReadyTimeout: JSONDuration(30 * time.Minute), DecisionTimeout: JSONDuration(24 * time.Hour), EvidenceKeep: JSONDuration(30 * 24 * time.Hour)}
}

// migrationEntry is the policy file's `migration:` block; unset fields keep the defaults.
type migrationEntry struct {
	Enabled           *bool             `yaml:"enabled"`
	PerNode           *int              `yaml:"perNode"`
	ClusterWide       *int              `yaml:"clusterWide"`
	CheckpointTimeout *Duration         `yaml:"checkpointTimeout"`
	ReadyTimeout      *Duration         `yaml:"readyTimeout"`
	DecisionTimeout   *Duration         `yaml:"decisionTimeout"`
	EvidenceKeep      *Duration         `yaml:"evidenceKeep"`
	TenantChannels    map[string]string `yaml:"tenantChannels"`
}

func (m *migrationEntry) apply(dst *Migration) {
	if m == nil {
		return
	}
	if dst.PerNode == 0 { // first time turned on: start from the defaults
		*dst = DefaultMigration()
	}
	if m.Enabled != nil {
		dst.Enabled = *m.Enabled
	}
	if m.PerNode != nil {
		dst.PerNode = *m.PerNode
	}
	if m.ClusterWide != nil {
		dst.ClusterWide = *m.ClusterWide
	}
	setDuration(&dst.CheckpointTimeout, m.CheckpointTimeout)
	setDuration(&dst.ReadyTimeout, m.ReadyTimeout)
	setDuration(&dst.DecisionTimeout, m.DecisionTimeout)
	setDuration(&dst.EvidenceKeep, m.EvidenceKeep)
	if m.TenantChannels != nil {
		dst.TenantChannels = m.TenantChannels
	}
}

// validate checks a migration block that is turned on.
func (m Migration) validate() error {
	if !m.Enabled {
		return nil
	}
	switch {
	case m.PerNode < 1 || m.ClusterWide < 1:
		return fmt.Errorf("migration.perNode and migration.clusterWide must be >= 1, got %d and %d", m.PerNode, m.ClusterWide)
	case m.PerNode > m.ClusterWide:
		return fmt.Errorf("migration.perNode (%d) must not exceed migration.clusterWide (%d)", m.PerNode, m.ClusterWide)
	case m.CheckpointTimeout <= 0 || m.ReadyTimeout <= 0 || m.DecisionTimeout <= 0 || m.EvidenceKeep <= 0:
		return fmt.Errorf("migration.checkpointTimeout, readyTimeout, decisionTimeout and evidenceKeep must be positive")
	}
	return nil
}

// migrationWarning explains a policy whose taint effect defeats its own migration.
func (p Policy) migrationWarning() string {
	if !p.Migration.Enabled || p.TaintEffect != EffectNoExecute {
		return ""
	}
	return fmt.Sprintf("policy %q: migration is on, but taintEffect NoExecute defeats it: the kube-controller-manager evicts the device's Pods as soon as the rule exists, before any checkpoint is asked for; use NoSchedule to let migration checkpoint and move them", p.Name)
}
