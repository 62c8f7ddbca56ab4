package api

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Workload is what a migration moves: the top owner of the Pods on a failed device (Job, JobSet,
// StatefulSet, Deployment, ReplicaSet, another controller, or a bare Pod). Its namespace is its tenant.
type Workload struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	// Pods are the workload's Pods on the failed device.
	Pods []string `json:"pods"`
	// Checkpoint is how the workload saves its progress (none or annotation); Shrinkable says one
	// of its Pods may move alone.
	Checkpoint string `json:"checkpoint"`
	Shrinkable bool   `json:"shrinkable,omitempty"`
	// Problems are declarations that could not be read; the workload is then taken at its safest
	// (no checkpoint, moves as a whole) and a person sees why.
	Problems []string `json:"problems,omitempty"`
}

// LimiterInput starts (or continues) the migration limiter.
type LimiterInput struct {
	State *migrationplan.SlotState `json:"state,omitempty"`
}

// MigrateInput starts the migration of one workload off a quarantined device.
type MigrateInput struct {
	Device   device.ID `json:"device"`
	Node     string    `json:"node"`
	Workload Workload  `json:"workload"`
	// StatusVersion is the Pod status version of the report that quarantined the device.
	StatusVersion string `json:"statusVersion"`
	// Report is that report, as the device workflow recorded it (kept with the evidence).
	Report        string           `json:"report"`
	QuarantinedAt time.Time        `json:"quarantinedAt"`
	Policy        policy.Migration `json:"policy"`
	// Channel is the policy's Slack channel, for outcomes; a tenant's own channel comes from the policy.
	Channel string `json:"channel,omitempty"`
	// Carried is where the previous run stopped when it continued as new; nil in a first run.
	Carried *MigrationCarry `json:"carried,omitempty"`
}

// MigrationCarry is what a migration hands the next run when its history is full: it waited for a
// slot or for the breaker, and waits on.
type MigrationCarry struct {
	State   migrationplan.MigrationState `json:"state"`
	Slot    bool                         `json:"slot,omitempty"`
	Started time.Time                    `json:"started"`
	// Anyway is the mechanism a person's migrate-anyway chose, when the wait came after it.
	Anyway string `json:"anyway,omitempty"`
}

// MigrationID is a migration's business key: a repeated trigger for the same report joins the same
// run, a new failure episode (a newer status version) starts a new one.
func MigrationID(dev device.ID, workloadUID, statusVersion string) string {
	return "migrate/" + dev.String() + "/" + workloadUID + "/" + statusVersion
}
