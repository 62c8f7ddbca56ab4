package devicemsg

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// DeviceView is where a device stands, for a person and for the tools that show it (the CLI, the
// fleet page, the benchmarks): the device workflow's `view` query answers it. Its fields keep the
// names they have in the workflow's own state, which the `state` query answers.
type DeviceView struct {
	Device device.ID `json:"device"`
	Node   string    `json:"node"`
	// Unit is the physical unit, for a device published in several forms.
	Unit  *device.Unit `json:"unit,omitempty"`
	State State        `json:"state"`
	// Summary is the one line a person reads: the state, since when, why, by whom, and Next.
	Summary string `json:"summary,omitempty"`
	// Next says what the workflow does next, and when.
	Next   string     `json:"next,omitempty"`
	Paused bool       `json:"paused,omitempty"`
	Policy PolicyView `json:"policy"`
	// Health, Message and StatusVersion are the last report's, observed at ObservedAt.
	Health        device.Health `json:"health"`
	Message       string        `json:"message,omitempty"`
	StatusVersion string        `json:"statusVersion,omitempty"`
	ObservedAt    time.Time     `json:"observedAt"`
	// LastHeard is when the watcher last confirmed the report (heartbeats included).
	LastHeard time.Time  `json:"lastHeard"`
	Reporters []Reporter `json:"reporters,omitempty"`
	// Withheld: the circuit breaker withholds an automatic action, for HeldReason.
	Withheld   bool             `json:"withheld,omitempty"`
	HeldReason string           `json:"heldReason,omitempty"`
	Quarantine *QuarantineView  `json:"quarantine,omitempty"`
	Review     *ReviewView      `json:"review,omitempty"`
	LastProbe  *StepResult      `json:"lastProbe,omitempty"`
	Closed     []QuarantineView `json:"closed,omitempty"`
	Migrations []string         `json:"migrations,omitempty"`
	// Transitions are the newest state changes, oldest first.
	Transitions []Transition `json:"transitions,omitempty"`
	Dropped     int          `json:"dropped,omitempty"`
	LastDropped string       `json:"lastDropped,omitempty"`
	// AppFaults counts the application faults the device reported and stayed in service for;
	// AppFaultsRecent those within the policy's window, which fence it at its limit.
	AppFaults       int `json:"appFaults,omitempty"`
	AppFaultsRecent int `json:"appFaultsRecent,omitempty"`
	// Standing are the detectors' faults that still stand (a recovery action not back to none):
	// a review does not release the device while one does.
	Standing []string `json:"standing,omitempty"`
	// NotRun is the check or repair step that did not run (the tooling failed, not the device)
	// and waits to be taken again.
	NotRun *NotRunView `json:"notRun,omitempty"`
}

// NotRunView is a check or step that did not run: what, how many times in a row, why, and when it
// is taken again.
type NotRunView struct {
	Kind    string    `json:"kind"`
	Count   int       `json:"count"`
	Reason  string    `json:"reason"`
	RetryAt time.Time `json:"retryAt"`
}

// PolicyView is what a person checks of the policy a device runs under.
type PolicyView struct {
	Name             string              `json:"name"`
	QuarantineLease  policy.JSONDuration `json:"quarantineLease"`
	StabilityWindow  policy.JSONDuration `json:"stabilityWindow"`
	ApprovalRequired bool                `json:"approvalRequired"`
}

// QuarantineView is one quarantine or restriction: open, or closed (ClosedAt set).
type QuarantineView struct {
	RuleName  string    `json:"ruleName"`
	Effect    string    `json:"effect"`
	Reason    string    `json:"reason"`
	Actor     string    `json:"actor"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	Reviews   int       `json:"reviews,omitempty"`
	// Ladder is set when the quarantine climbs its policy's repair ladder.
	Ladder *LadderView `json:"ladder,omitempty"`
	// Cause is what made the fault ("xid 79 (PCI 0000:3b:00)"), First the step it chose and
	// FirstWhy what chose it ("catalogue: xid 79").
	Cause       string    `json:"cause,omitempty"`
	First       string    `json:"first,omitempty"`
	FirstWhy    string    `json:"firstWhy,omitempty"`
	ClosedAt    time.Time `json:"closedAt,omitempty"`
	ClosedBy    string    `json:"closedBy,omitempty"`
	CloseReason string    `json:"closeReason,omitempty"`
}

// LadderView is a quarantine's repair tries, oldest first.
type LadderView struct {
	Tries []TryView `json:"tries,omitempty"`
}

// TryView is one repair try and how the review after it ended ("" while it runs).
type TryView struct {
	Kind    string      `json:"kind"`
	Attempt int         `json:"attempt"`
	At      time.Time   `json:"at"`
	Result  *StepResult `json:"result,omitempty"`
	Review  string      `json:"review,omitempty"`
}

// ReviewView is a recovery review in progress.
type ReviewView struct {
	Stage      Stage       `json:"stage"`
	Trigger    string      `json:"trigger"`
	StartedAt  time.Time   `json:"startedAt"`
	Until      time.Time   `json:"until,omitempty"`
	Probe      *StepResult `json:"probe,omitempty"`
	Canary     *StepResult `json:"canary,omitempty"`
	ApprovedBy string      `json:"approvedBy,omitempty"`
	// After is the repair step the review follows ("" for none), and ProbeWith the image and
	// command of its probe, which the policy may choose by that path.
	After     string `json:"after,omitempty"`
	ProbeWith string `json:"probeWith,omitempty"`
}

// Transition records a state change and why.
type Transition struct {
	From   State     `json:"from"`
	To     State     `json:"to"`
	Reason string    `json:"reason"`
	Actor  string    `json:"actor"`
	At     time.Time `json:"at"`
}

// Stage is where a recovery review stands.
type Stage string

// Review stages, in order: probe -> probation taint -> canary -> stability window -> sources ->
// approval -> release.
const (
	StageProbe     Stage = "Probe"
	StageProbation Stage = "Probation"
	StageCanary    Stage = "Canary"
	StageStability Stage = "Stability"
	// StageSources: the checks passed and the window ended, and the review waits for the sources
	// that reported the fault to say Healthy (decide.Rules.SourceProof).
	StageSources  Stage = "Sources"
	StageApproval Stage = "Approval"
	StageRelease  Stage = "Release"
)

// The taint keys of DeviceWarden's rules: a Pod that must run on a fenced device (a probe, a
// canary, a reset) tolerates them.
const (
	TaintQuarantine = "devicewarden.io/quarantine"
	TaintProbation  = "devicewarden.io/probation"
)
