package migrationplan

import (
	"fmt"
	"time"

	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// ActionMigrate is what a migration asks the circuit breaker for: one eviction or suspension. It
// draws on the same budget as quarantines, so a storm cannot move more jobs than the breaker allows.
// (A permit action, not a device state.)
var ActionMigrate = devicemsg.State("Migrate")

// MigrationPhase is where a migration stands; the migration's query shows it.
type MigrationPhase string

const (
	PhaseWaitingForSlot     MigrationPhase = "WaitingForSlot"
	PhaseWaitingForBreaker  MigrationPhase = "WaitingForBreaker"
	PhaseCheckpointing      MigrationPhase = "Checkpointing"
	PhaseMoving             MigrationPhase = "Moving"
	PhaseWaitingForReady    MigrationPhase = "WaitingForReady"
	PhaseWaitingForDecision MigrationPhase = "WaitingForDecision"
	PhaseDone               MigrationPhase = "Done"
)

// MigrationOutcome is how a migration ended.
type MigrationOutcome string

const (
	OutcomeMigrated          MigrationOutcome = "migrated"
	OutcomeEvidencePreserved MigrationOutcome = "evidence-preserved"
	OutcomeAbandoned         MigrationOutcome = "abandoned"
	OutcomeFailed            MigrationOutcome = "failed"
)

// FailureClass says what a failed migration needs: retryable (a later attempt may succeed),
// non-retryable (it must not be tried again as is), needs-cleanup (it left something half done, e.g.
// a suspended Job, that a person must look at).
type FailureClass string

const (
	FailRetryable    FailureClass = "retryable"
	FailNonRetryable FailureClass = "non-retryable"
	FailNeedsCleanup FailureClass = "needs-cleanup"
)

// Move mechanisms, least disruptive first.
const (
	MoveSuspend = "suspend" // a Job or JobSet: spec.suspend, then resume
	MoveEvict   = "evict"   // a Pod of a shrinkable or replicated workload, through the Eviction API
	MoveNone    = "none"    // a bare Pod: nothing would recreate it
)

// MoveMechanism picks how a workload moves: a whole Job or JobSet is suspended and resumed; one shard of a
// shrinkable Job, or a Pod whose controller recreates it, is evicted; a bare Pod has no owner to
// recreate it and is not moved without a person's word.
func MoveMechanism(kind string, shrinkable bool) string {
	switch {
	case kind == "Pod":
		return MoveNone
	case (kind == "Job" || kind == "JobSet") && !shrinkable:
		return MoveSuspend
	}
	return MoveEvict
}

// Recoverable says whether a workload can move without losing what it computed: it saves its
// progress on request, or an owner restarts it.
func Recoverable(kind, checkpoint string) bool {
	return checkpoint == "annotation" || MoveMechanism(kind, false) != MoveNone
}

// MigrationState is a migration's record: the query answers with it and the result carries it.
type MigrationState struct {
	Phase   MigrationPhase   `json:"phase"`
	Waiting string           `json:"waiting,omitempty"`
	Outcome MigrationOutcome `json:"outcome,omitempty"`
	Class   FailureClass     `json:"class,omitempty"`
	Reason  string           `json:"reason,omitempty"`
	Actor   string           `json:"actor,omitempty"`
	// SlotAt and SlotFreedAt bound the time the migration held its rate-limit slot.
	SlotAt      time.Time `json:"slotAt,omitzero"`
	SlotFreedAt time.Time `json:"slotFreedAt,omitzero"`
	// CheckpointWait is how long the workload took to answer the checkpoint request.
	CheckpointWait policy.JSONDuration `json:"checkpointWait,omitempty"`
	Mechanism      string              `json:"mechanism,omitempty"`
	// Moved are the Pods moved (evicted, or removed by the suspension); Ready the Pods that took over.
	Moved    []string `json:"moved,omitempty"`
	Ready    []string `json:"ready,omitempty"`
	Evidence string   `json:"evidence,omitempty"`
	Steps    []Step   `json:"steps,omitempty"`
}

// Step is one line of a migration's audit trail.
type Step struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Record adds a step.
func (m *MigrationState) Record(now time.Time, format string, args ...any) {
	m.Steps = append(m.Steps, Step{At: now, What: fmt.Sprintf(format, args...)})
}

// Finish sets the outcome.
func (m *MigrationState) Finish(o MigrationOutcome, class FailureClass, reason string, now time.Time) {
	m.Phase, m.Waiting, m.Outcome, m.Class, m.Reason = PhaseDone, "", o, class, reason
	if class != "" {
		m.Record(now, "%s (%s): %s", o, class, reason)
		return
	}
	m.Record(now, "%s: %s", o, reason)
}

// MigrationDecision is a person's word on a workload that could not be moved safely.
type MigrationDecision struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason,omitempty"`
}

// ValidateDecision refuses a decision when none is awaited or nobody signs it.
func (m *MigrationState) ValidateDecision(d MigrationDecision) error {
	switch {
	case m.Phase != PhaseWaitingForDecision:
		return fmt.Errorf("the migration is %s, not waiting for a decision", m.Phase)
	case d.Actor == "":
		return fmt.Errorf("actor is required: every operator action is audited")
	case len(d.Reason) > devicemsg.MaxReason:
		return fmt.Errorf("reason is %d characters, at most %d", len(d.Reason), devicemsg.MaxReason)
	}
	return nil
}
