// Package workflows holds DeviceWarden's deterministic orchestration. Nothing here does I/O:
// every side effect is an activity in package activities, and every decision is made by the pure
// state machines in internal/policy.
package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rollout"
)

// Task queue, workflow, signal, query and update names. Operators and the Temporal CLI use these.
const (
	TaskQueue = "devicewarden"
	// BreakerTaskQueue is the breaker workflow's own task queue, served by a worker of its own.
	BreakerTaskQueue = "devicewarden-breaker"
	// RunningDevicesQuery is the visibility query for every running device workflow.
	RunningDevicesQuery = "WorkflowType = 'DeviceWorkflow' AND ExecutionStatus = 'Running'"

	// SignalObservation delivers a health Observation from the watcher (watchers before
	// UpdateObservation; still taken).
	SignalObservation = "observation"
	// UpdateObservation delivers a health Observation and completes once the workflow has taken
	// it in: the watcher waits for it, so Temporal never holds more undecided reports than the
	// watcher has workers, and an operator's command does not queue behind a storm.
	UpdateObservation = "observe"
	// Operator commands to a device workflow, as updates (validated and answered with a
	// policy.CommandResult) and as signals of the same names (fire-and-forget; a payload that does
	// not decode is recorded and dropped). The payload is a policy.Command (kind may be omitted).
	SignalForceQuarantine = string(policy.CmdForceQuarantine)
	SignalRelease         = string(policy.CmdRelease)
	SignalExtend          = string(policy.CmdExtend)
	SignalPause           = string(policy.CmdPause)
	SignalResume          = string(policy.CmdResume)
	SignalApprove         = string(policy.CmdApprove)
	SignalReject          = string(policy.CmdReject)
	SignalReleaseApproval = string(policy.CmdReleaseApproval)
	// QueryState returns a device's policy.DeviceState, or the breaker's policy.BreakerState.
	QueryState = "state"

	// BreakerWorkflowID is the one circuit-breaker workflow of a namespace.
	BreakerWorkflowID = "devicewarden-breaker"
	// UpdateAcquire asks the breaker for a permit (policy.PermitRequest -> policy.PermitResult).
	UpdateAcquire = "acquire"
	// UpdateBreakerConfigure sets the breaker's configuration (ConfigureBreaker -> BreakerState):
	// its one owner, sent once by each worker as it starts.
	UpdateBreakerConfigure = "configure"
	// Breaker signals: resume re-arms an open breaker, pause opens it by hand (payload BreakerSignal).
	SignalBreakerResume = "resume"
	SignalBreakerPause  = "pause"
	// SignalBreakerWake tells a device workflow the breaker may grant again: its held action is
	// retried now rather than at its fallback time.
	SignalBreakerWake = "breaker-wake"
	// SignalBreakerWait hands the breaker devices a worker denied on its behalf ([]string of
	// device IDs), so that a resume wakes them too.
	SignalBreakerWait = "wait"
	// UpdateLease asks the breaker for a permit and a batch of permits to keep
	// (policy.LeaseRequest -> policy.LeaseResult).
	UpdateLease = "lease"
	// SignalPermitsReport tells the breaker what became of leased permits ([]policy.LeaseReport).
	SignalPermitsReport = "permits-used"
	// UpdateBreakerPause opens the breaker by hand and answers once no worker can spend a leased
	// permit any more (BreakerSignal -> policy.BreakerState).
	UpdateBreakerPause = "pause"

	// SignalDeviceFailed tells a node's workflow that one of its devices was tainted
	// (payload policy.NodeFailure).
	SignalDeviceFailed = "device-failed"

	// MigrationLimiterID is the one migration-limiter workflow of a namespace.
	MigrationLimiterID = "devicewarden-migrations"
	// Limiter signals: a migration asks for a slot (policy.SlotRequest) and frees it (its ID); the
	// limiter answers a granted request with slot-granted on the migration.
	SignalSlotAcquire = "acquire-slot"
	SignalSlotRelease = "release-slot"
	SignalSlotGranted = "slot-granted"
	// Updates to a migration that waits for a person (payload policy.MigrationDecision).
	UpdateMigrateAnyway = "migrate-anyway"
	UpdateAbandon       = "abandon"

	// Rollout commands, as updates (payload rollout.Command; answered with the RolloutStatus).
	UpdateRolloutPause    = rollout.CmdPause
	UpdateRolloutResume   = rollout.CmdResume
	UpdateRolloutRollback = rollout.CmdRollback
	UpdateRolloutApprove  = rollout.CmdApprove
	// SignalRolloutWindow opens a scheduled rollout's window (payload RolloutWindow).
	SignalRolloutWindow = "window"
)

// OperatorSignals are the device workflow's operator signals.
var OperatorSignals = []string{SignalForceQuarantine, SignalExtend, SignalPause, SignalResume, SignalReleaseApproval,
	SignalRelease, SignalApprove, SignalReject}

// Search attributes (Keyword) the device workflow sets; registered at start.
var (
	SearchDeviceID     = temporal.NewSearchAttributeKeyKeyword("DeviceID")
	SearchDeviceNode   = temporal.NewSearchAttributeKeyKeyword("DeviceNode")
	SearchDeviceDriver = temporal.NewSearchAttributeKeyKeyword("DeviceDriver")
	SearchDeviceState  = temporal.NewSearchAttributeKeyKeyword("DeviceState")
)

// SearchDeviceForms (KeywordList) are the devices a physical unit's workflow fences, as
// "<driver>/<pool>/<device>": `DeviceForms = '<a partition>'` finds the unit a partition is of.
var SearchDeviceForms = temporal.NewSearchAttributeKeyKeywordList("DeviceForms")

// SearchAttributeNames lists every custom Keyword search attribute, for registration;
// SearchAttributeLists the KeywordList ones.
var (
	SearchAttributeNames = []string{"DeviceID", "DeviceNode", "DeviceDriver", "DeviceState", "RolloutName", "RolloutPhase", "RolloutState"}
	SearchAttributeLists = []string{"DeviceForms"}
)

// Search attributes (Keyword) of a rollout, so the Temporal UI lists rollouts and where they stand.
var (
	SearchRolloutName  = temporal.NewSearchAttributeKeyKeyword("RolloutName")
	SearchRolloutPhase = temporal.NewSearchAttributeKeyKeyword("RolloutPhase")
	SearchRolloutState = temporal.NewSearchAttributeKeyKeyword("RolloutState")
)

// The state model lives in internal/policy; these names keep the workflow API in one place.
type (
	Observation = policy.Observation
	Reporter    = policy.Reporter
	DeviceState = policy.DeviceState
	Command     = policy.Command
)

// DeviceInput starts a device workflow.
type DeviceInput struct {
	Device device.ID     `json:"device"`
	Node   string        `json:"node"`
	Policy policy.Policy `json:"policy"`
	// DryRun makes every taint use effect None (preview only).
	DryRun bool `json:"dryRun,omitempty"`
	// State carries the state across continue-as-new.
	State *policy.DeviceState `json:"state,omitempty"`
}

// PermitQueue is the task queue where one worker process answers the breaker's revocation of
// the permits it leased.
func PermitQueue(worker string) string { return "devicewarden-permits/" + worker }

// BreakerInput starts (or continues) the breaker workflow.
type BreakerInput struct {
	State *policy.BreakerState `json:"state,omitempty"`
}

// BreakerSignal is the payload of the breaker's resume and pause signals.
type BreakerSignal struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason,omitempty"`
	// At is when the operator sent it: a pause and a resume that reach the breaker together are
	// applied in the order they were sent (signals on two channels arrive without an order).
	At time.Time `json:"at,omitzero"`
}

// NodeInput starts (or continues) a node's workflow.
type NodeInput struct {
	Node  string            `json:"node"`
	State *policy.NodeState `json:"state,omitempty"`
}

// ConfigureBreaker is the `configure` update's argument.
type ConfigureBreaker struct {
	Config policy.BreakerConfig `json:"config"`
	Owner  string               `json:"owner"`
}

// LimiterInput starts (or continues) the migration limiter.
type LimiterInput struct {
	State *policy.SlotState `json:"state,omitempty"`
}

// MigrateInput starts the migration of one workload off a quarantined device.
type MigrateInput struct {
	Device   device.ID          `json:"device"`
	Node     string             `json:"node"`
	Workload migration.Workload `json:"workload"`
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
	State   policy.MigrationState `json:"state"`
	Slot    bool                  `json:"slot,omitempty"`
	Started time.Time             `json:"started"`
	// Anyway is the mechanism a person's migrate-anyway chose, when the wait came after it.
	Anyway string `json:"anyway,omitempty"`
}

// MigrationID is a migration's business key: a repeated trigger for the same report joins the same
// run, a new failure episode (a newer status version) starts a new one.
func MigrationID(dev device.ID, workloadUID, statusVersion string) string {
	return "migrate/" + dev.String() + "/" + workloadUID + "/" + statusVersion
}

// All lists every workflow type by name, for the worker to register and for the replay-coverage
// check to require a recorded history of each.
var All = map[string]any{"DeviceWorkflow": DeviceWorkflow, "BreakerWorkflow": BreakerWorkflow, "NodeWorkflow": NodeWorkflow,
	"MigrateWorkflow": MigrateWorkflow, "MigrationLimiterWorkflow": MigrationLimiterWorkflow,
	"RolloutWorkflow": RolloutWorkflow, "RolloutWindowWorkflow": RolloutWindowWorkflow, "ClaimHygieneWorkflow": ClaimHygieneWorkflow}

// RolloutInput starts (or continues) a rollout.
type RolloutInput struct {
	Plan rollout.Plan `json:"plan"`
	// Scheduled: preflight and enable wait for a window opened by the rollout's Schedule.
	Scheduled bool           `json:"scheduled,omitempty"`
	State     *RolloutStatus `json:"state,omitempty"`
}

// RolloutStatus is a rollout's progress: the answer to its state query and its result.
type RolloutStatus struct {
	Plan      string        `json:"plan"`
	Phase     int           `json:"phase"`
	Step      rollout.Step  `json:"step"`
	State     rollout.State `json:"state"`
	Paused    bool          `json:"paused,omitempty"`
	Scheduled bool          `json:"scheduled,omitempty"`
	// WindowUntil is when a scheduled rollout's open window closes.
	WindowUntil time.Time `json:"windowUntil,omitzero"`
	SoakUntil   time.Time `json:"soakUntil,omitzero"`
	// GatesWaitUntil bounds how long the phase's gates wait for data (onNoData: wait): one soak
	// past the first measurement that found none.
	GatesWaitUntil time.Time `json:"gatesWaitUntil,omitzero"`
	// Awaiting is the phase whose next phase waits for approval.
	Awaiting string `json:"awaiting,omitempty"`
	// Enabled are the phases switched to DRA and not rolled back, oldest first: what a rollback undoes.
	Enabled []rollout.PhaseChange `json:"enabled,omitempty"`
	// Draining are rolled-back phases' nodes kept on DRA while claims are allocated on them.
	Draining []DrainingPhase `json:"draining,omitempty"`
	// Blocks are the admission blocks of rolled-back phases, lifted when a phase is enabled again.
	Blocks     []rollouts.BlockInput `json:"blocks,omitempty"`
	Violations []rollout.Violation   `json:"violations,omitempty"`
	Reports    []rollout.Report      `json:"reports,omitempty"`
	// RollbackPending is a rollback command not carried out yet.
	RollbackPending *rollout.Command `json:"rollbackPending,omitempty"`
	// Retry is set by resume in a blocked or rolled-back rollout.
	Retry bool `json:"retry,omitempty"`
	// Unfinished is a rollback that could not finish; a resume tries it again.
	Unfinished *UnfinishedRollback `json:"unfinished,omitempty"`
	// HoldUntil is when a rolled-back rollout ends unless resumed (kept across continue-as-new).
	HoldUntil time.Time `json:"holdUntil,omitzero"`
	// Log is the rollout's story, newest last (the last 100 entries).
	Log []RolloutEntry `json:"log,omitempty"`
}

// UnfinishedRollback is a rollback of the newest Phases enabled phases that stopped at an error.
type UnfinishedRollback struct {
	Phases int    `json:"phases"`
	Reason string `json:"reason"`
}

// DrainingPhase is a rolled-back phase's nodes that bound claims hold on DRA.
type DrainingPhase struct {
	Change  rollout.PhaseChange `json:"change"`
	Drivers []string            `json:"drivers"`
	Reason  string              `json:"reason"`
}

// Phase is the phase's name.
func (d DrainingPhase) Phase() string { return d.Change.Phase }

// RolloutEntry is one line of a rollout's story.
type RolloutEntry struct {
	At   time.Time `json:"at"`
	Text string    `json:"text"`
}

// RolloutWindow is the window signal's payload: enable steps may run until Until.
type RolloutWindow struct {
	Until time.Time `json:"until"`
}

// RolloutWindowInput is what a rollout's Schedule starts each window with.
type RolloutWindowInput struct {
	Plan   rollout.Plan        `json:"plan"`
	Window policy.JSONDuration `json:"window"`
}

// RolloutID is a rollout's workflow ID.
func RolloutID(name string) string { return rollout.WorkflowID(name) }
