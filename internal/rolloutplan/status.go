package rolloutplan

import (
	"errors"
	"fmt"
	"time"
)

// State is where a rollout stands, as the Temporal UI lists it (search attribute RolloutState).
type State string

// Rollout states.
const (
	StateRunning         State = "running"
	StatePaused          State = "paused"
	StateWaitingWindow   State = "waiting-window"
	StateBlocked         State = "blocked"
	StateWaitingApproval State = "waiting-approval"
	// StateProving: a phase's enforcement proof runs; its tenants wait.
	StateProving    State = "proving"
	StateRolledBack State = "rolled-back"
	// StateBlocking: a phase is being rolled back and its admission block is not proven in force
	// yet (new claims for its classes may still be admitted).
	StateBlocking  State = "blocking"
	StateCompleted State = "completed"
	// StateTerminated is a run that ended without a result of its own (terminated, failed, timed
	// out or cancelled): what a schedule's window finds, never a running rollout's state.
	StateTerminated State = "terminated"
)

// Step is a phase's step.
type Step string

// Phase steps, in order.
const (
	StepPreflight Step = "preflight"
	StepEnable    Step = "enable"
	// StepProve runs the enforcement proof of a phase that asks for one, before its tenants may
	// claim its classes.
	StepProve   Step = "prove"
	StepSoak    Step = "soak"
	StepGates   Step = "gates"
	StepApprove Step = "approve"
)

// Command is an operator's command to a rollout: pause, resume, rollback or approve-phase.
type Command struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason,omitempty"`
	// Phase is the phase being approved (approve-phase only).
	Phase string `json:"phase,omitempty"`
	// At is when it was sent (stamped by the CLI; informational).
	At time.Time `json:"at,omitempty"`
}

// Command names (also the Temporal update names).
const (
	CmdPause    = "pause"
	CmdResume   = "resume"
	CmdRollback = "rollback"
	CmdApprove  = "approve-phase"
)

// Standing is what a command's validator needs to know about the rollout.
type Standing struct {
	State State
	// Paused is set by pause and cleared by resume, whatever the state.
	Paused bool
	// Enabled is how many phases are switched to DRA and not rolled back.
	Enabled int
	// Awaiting is the phase waiting for approval ("" when none).
	Awaiting string
	// RollbackPending: a rollback was asked for and has not run yet.
	RollbackPending bool
}

// CheckCommand refuses a command that cannot apply now, saying why; an accepted command is
// recorded in the rollout's history, a refused one leaves none.
func CheckCommand(name string, c Command, s Standing) error {
	if c.Actor == "" {
		return errors.New("actor is required: say who asks")
	}
	switch name {
	case CmdPause:
		if s.Paused {
			return errors.New("already paused")
		}
		if s.State == StateCompleted || s.State == StateRolledBack {
			return fmt.Errorf("the rollout is %s: nothing to pause", s.State)
		}
	case CmdResume:
		if !s.Paused && s.State != StateBlocked && s.State != StateRolledBack {
			return fmt.Errorf("the rollout is %s, not paused, blocked or rolled back", s.State)
		}
	case CmdRollback:
		if s.RollbackPending {
			return errors.New("a rollback is already under way")
		}
		if s.State == StateBlocking {
			// The rollback under way ends by clearing what it was asked; a second one would be lost.
			return errors.New("a phase is being rolled back: send the rollback again once it is rolled back")
		}
		if s.Enabled == 0 {
			return fmt.Errorf("no phase is enabled (the rollout is %s): nothing to roll back", s.State)
		}
	case CmdApprove:
		if s.Awaiting == "" {
			return fmt.Errorf("no phase waits for approval (the rollout is %s)", s.State)
		}
		if c.Phase != s.Awaiting {
			return fmt.Errorf("phase %q does not wait for approval; %q does", c.Phase, s.Awaiting)
		}
	default:
		return fmt.Errorf("unknown command %q", name)
	}
	return nil
}
