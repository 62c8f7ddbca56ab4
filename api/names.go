// Package api is DeviceWarden's workflow contract: the task queues, workflow type names and IDs,
// the signal, query and update names with their payloads, the search attributes, and typed
// clients that start and call the workflows by their registered names. The watcher, the Slack
// app, the CLI and the app need only this package; package workflows implements it.
package api

import (
	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// Workflow type names, as registered by the worker. Recorded histories carry them: they never change.
const (
	DeviceWorkflow           = "DeviceWorkflow"
	BreakerWorkflow          = "BreakerWorkflow"
	NodeWorkflow             = "NodeWorkflow"
	MigrateWorkflow          = "MigrateWorkflow"
	MigrationLimiterWorkflow = "MigrationLimiterWorkflow"
	RolloutWorkflow          = "RolloutWorkflow"
	RolloutWindowWorkflow    = "RolloutWindowWorkflow"
	ClaimHygieneWorkflow     = "ClaimHygieneWorkflow"
)

// WorkflowTypes lists every workflow type name.
var WorkflowTypes = []string{DeviceWorkflow, BreakerWorkflow, NodeWorkflow, MigrateWorkflow, MigrationLimiterWorkflow,
	RolloutWorkflow, RolloutWindowWorkflow, ClaimHygieneWorkflow}

// Task queue, signal, query and update names. Operators and the Temporal CLI use these.
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
	// devicemsg.CommandResult) and as signals of the same names (fire-and-forget; a payload that does
	// not decode is recorded and dropped). The payload is a devicemsg.Command (kind may be omitted).
	SignalForceQuarantine = string(devicemsg.CmdForceQuarantine)
	SignalRelease         = string(devicemsg.CmdRelease)
	SignalExtend          = string(devicemsg.CmdExtend)
	SignalPause           = string(devicemsg.CmdPause)
	SignalResume          = string(devicemsg.CmdResume)
	SignalApprove         = string(devicemsg.CmdApprove)
	SignalReject          = string(devicemsg.CmdReject)
	SignalReleaseApproval = string(devicemsg.CmdReleaseApproval)
	// QueryState returns a device workflow's own state (its decisions' record, for the workflow
	// and its replays), or the breaker's breaker.State.
	QueryState = "state"
	// QueryView returns where a device stands (devicemsg.DeviceView): what tools show a person.
	QueryView = "view"
	// QueryRules returns the decision rules a device workflow's run follows (devicemsg.Rules): the
	// changes its version markers took, which tell an upgrade's old runs from new ones.
	QueryRules = "rules"

	// BreakerWorkflowID is the one circuit-breaker workflow of a namespace.
	BreakerWorkflowID = "devicewarden-breaker"
	// UpdateAcquire asks the breaker for a permit (breaker.PermitRequest -> breaker.PermitResult).
	UpdateAcquire = "acquire"
	// UpdateBreakerConfigure sets the breaker's configuration (ConfigureBreaker -> breaker.State):
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
	// (breaker.LeaseRequest -> breaker.LeaseResult).
	UpdateLease = "lease"
	// SignalPermitsReport tells the breaker what became of leased permits ([]breaker.LeaseReport).
	SignalPermitsReport = "permits-used"
	// SignalPermitRelease gives a node's permit back once its node step ended
	// (breaker.PermitRelease).
	SignalPermitRelease = "permit-release"
	// UpdateBreakerPause opens the breaker by hand and answers once no worker can spend a leased
	// permit any more (BreakerSignal -> breaker.State).
	UpdateBreakerPause = "pause"

	// SignalDeviceFailed tells a node's workflow that one of its devices was tainted
	// (payload escalation.NodeFailure).
	SignalDeviceFailed = "device-failed"

	// MigrationLimiterID is the one migration-limiter workflow of a namespace.
	MigrationLimiterID = "devicewarden-migrations"
	// Limiter signals: a migration asks for a slot (migrationplan.SlotRequest) and frees it (its ID); the
	// limiter answers a granted request with slot-granted on the migration.
	SignalSlotAcquire = "acquire-slot"
	SignalSlotRelease = "release-slot"
	SignalSlotGranted = "slot-granted"
	// Updates to a migration that waits for a person (payload migrationplan.MigrationDecision).
	UpdateMigrateAnyway = "migrate-anyway"
	UpdateAbandon       = "abandon"

	// Rollout commands, as updates (payload rolloutplan.Command; answered with the RolloutStatus).
	UpdateRolloutPause    = rolloutplan.CmdPause
	UpdateRolloutResume   = rolloutplan.CmdResume
	UpdateRolloutRollback = rolloutplan.CmdRollback
	UpdateRolloutApprove  = rolloutplan.CmdApprove
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
	// SearchDeviceRepair is the repair ladder's step and try ("reset 1/2"), empty when none runs.
	SearchDeviceRepair = temporal.NewSearchAttributeKeyKeyword("DeviceRepair")
	// SearchDeviceCause is the standing quarantine's cause and the first step it chose ("xid 79
	// -> node (catalogue: xid 79)"), empty when none stands.
	SearchDeviceCause = temporal.NewSearchAttributeKeyKeyword("DeviceCause")
)

// SearchDeviceForms (KeywordList) are the devices a physical unit's workflow fences, as
// "<driver>/<pool>/<device>": `DeviceForms = '<a partition>'` finds the unit a partition is of.
var SearchDeviceForms = temporal.NewSearchAttributeKeyKeywordList("DeviceForms")

// SearchAttributeNames lists every custom Keyword search attribute, for registration;
// SearchAttributeLists the KeywordList ones.
var (
	SearchAttributeNames = []string{"DeviceID", "DeviceNode", "DeviceDriver", "DeviceState", "DeviceRepair", "DeviceCause", "RolloutName", "RolloutPhase", "RolloutState"}
	SearchAttributeLists = []string{"DeviceForms"}
)

// Search attributes (Keyword) of a rollout, so the Temporal UI lists rollouts and where they stand.
var (
	SearchRolloutName  = temporal.NewSearchAttributeKeyKeyword("RolloutName")
	SearchRolloutPhase = temporal.NewSearchAttributeKeyKeyword("RolloutPhase")
	SearchRolloutState = temporal.NewSearchAttributeKeyKeyword("RolloutState")
)

// Actor is recorded on decisions DeviceWarden makes by itself.
const Actor = devicemsg.Actor

// The values a device workflow takes and answers live in internal/devicemsg; these names keep
// the workflow API in one place.
type (
	Observation = devicemsg.Observation
	Reporter    = devicemsg.Reporter
	DeviceView  = devicemsg.DeviceView
	Command     = devicemsg.Command
)
