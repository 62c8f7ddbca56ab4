package api

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// RolloutInput starts (or continues) a rollout.
type RolloutInput struct {
	Plan rolloutplan.Plan `json:"plan"`
	// Scheduled: preflight and enable wait for a window opened by the rollout's Schedule.
	Scheduled bool           `json:"scheduled,omitempty"`
	State     *RolloutStatus `json:"state,omitempty"`
}

// RolloutStatus is a rollout's progress: the answer to its state query and its result.
type RolloutStatus struct {
	Plan      string            `json:"plan"`
	Phase     int               `json:"phase"`
	Step      rolloutplan.Step  `json:"step"`
	State     rolloutplan.State `json:"state"`
	Paused    bool              `json:"paused,omitempty"`
	Scheduled bool              `json:"scheduled,omitempty"`
	// WindowUntil is when a scheduled rollout's open window closes.
	WindowUntil time.Time `json:"windowUntil,omitzero"`
	SoakUntil   time.Time `json:"soakUntil,omitzero"`
	// GatesWaitUntil bounds how long the phase's gates wait for data (onNoData: wait): one soak
	// past the first measurement that found none.
	GatesWaitUntil time.Time `json:"gatesWaitUntil,omitzero"`
	// Awaiting is the phase whose next phase waits for approval.
	Awaiting string `json:"awaiting,omitempty"`
	// Enabled are the phases switched to DRA and not rolled back, oldest first: what a rollback undoes.
	Enabled []rolloutplan.PhaseChange `json:"enabled,omitempty"`
	// Draining are rolled-back phases' nodes kept on DRA while claims are allocated on them.
	Draining []DrainingPhase `json:"draining,omitempty"`
	// Blocks are the admission blocks of rolled-back phases, lifted when a phase is enabled again.
	Blocks     []BlockInput            `json:"blocks,omitempty"`
	Violations []rolloutplan.Violation `json:"violations,omitempty"`
	Reports    []rolloutplan.Report    `json:"reports,omitempty"`
	// Proofs are the enforcement proofs run, oldest first (the last 20).
	Proofs []rolloutplan.ProofReport `json:"proofs,omitempty"`
	// Unproven is the phase whose failed proof waits for a person (onUnenforced: approve).
	Unproven string `json:"unproven,omitempty"`
	// SoftQuotas are the phases let in by a person although their proof failed.
	SoftQuotas []SoftQuota `json:"softQuotas,omitempty"`
	// RollbackPending is a rollback command not carried out yet.
	RollbackPending *rolloutplan.Command `json:"rollbackPending,omitempty"`
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
	Change  rolloutplan.PhaseChange `json:"change"`
	Drivers []string                `json:"drivers"`
	Reason  string                  `json:"reason"`
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
	Plan   rolloutplan.Plan    `json:"plan"`
	Window policy.JSONDuration `json:"window"`
}

// RolloutID is a rollout's workflow ID.
func RolloutID(name string) string { return "rollout/" + name }

// BlockInput names the classes whose new claims a rolled-back phase refuses.
type BlockInput struct {
	Rollout string   `json:"rollout"`
	Phase   string   `json:"phase"`
	Classes []string `json:"classes"`
	Reason  string   `json:"reason"`
	// Except is a namespace the block lets through: the enforcement proof's, while tenants wait
	// for it ("" for a rollback's block).
	Except string `json:"except,omitempty"`
}

// SoftQuota is a person's approval of a shared phase whose enforcement proof failed: its
// classes are labelled soft quota, no QoS.
type SoftQuota struct {
	Phase   string    `json:"phase"`
	Classes []string  `json:"classes"`
	Actor   string    `json:"actor"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
	Proof   string    `json:"proof"`
}

// OpenWindowInput opens a scheduled rollout's window until Until.
type OpenWindowInput struct {
	Plan  rolloutplan.Plan `json:"plan"`
	Until time.Time        `json:"until"`
}

// OpenWindowResult is where the rollout stands once its window is open.
type OpenWindowResult struct {
	Phase string            `json:"phase"`
	State rolloutplan.State `json:"state"`
	// Ended: a run of the rollout had ended, and the window started none (State is how it ended).
	Ended bool `json:"ended,omitempty"`
}

// GateInput asks for a phase's gate report over the claims created since the phase was enabled
// (the rollout activity EvaluateRolloutGates, which the
// benchmarks also call).
type GateInput struct {
	Plan     rolloutplan.Plan `json:"plan"`
	Phase    int              `json:"phase"`
	Since    time.Time        `json:"since"`
	Expected map[string]int64 `json:"expected,omitempty"`
}
