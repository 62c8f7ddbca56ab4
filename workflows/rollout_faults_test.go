package workflows

import (
	"context"
	"errors"
	"github.com/devicewarden/devicewarden/api"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// Slack being down never holds back a rollback: the alert before it is tried a bounded number of
// times, and the phase is rolled back within a minute of its failed gate.
func TestRolloutRollsBackWhileAlertsFail(t *testing.T) {
	alerts := 0
	r := newRolloutEnvWithAlert(t, func(context.Context, notify.AlertInput) error {
		alerts++
		return errors.New("slack: 503 service unavailable")
	})
	p := testPlan()
	p.Phases = p.Phases[:1]
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.rollbackActs()
	r.gates(func(int, int) []string { return []string{"drift"} })
	st := r.stateAt(10*time.Minute + time.Minute) // the gates fail at the end of the 10-minute soak
	r.env.RegisterDelayedCallback(r.env.CancelWorkflow, time.Hour)
	r.env.ExecuteWorkflow(RolloutWorkflow, api.RolloutInput{Plan: p})
	if st.State != rolloutplan.StateRolledBack {
		t.Fatalf("a minute after the failed gate: %s, want rolled back", st.State)
	}
	if alerts == 0 || alerts > 5 {
		t.Fatalf("alert tried %d times, want 1 to 5", alerts)
	}
}

// An enable that keeps failing holds the rollout blocked, saying why, after a bounded number of
// tries; a refusal no retry can fix is tried once. A resume retries the phase from preflight.
func TestRolloutEnableThatFailsHoldsBlocked(t *testing.T) {
	for _, tc := range []struct {
		name, says string
		err        error
		tries      int
	}{
		{"retryable", "etcdserver: request timed out", errors.New("etcdserver: request timed out"), stepAttempts},
		{"forbidden", "nodes is forbidden", temporal.NewNonRetryableApplicationError("nodes is forbidden", rollouts.ErrRolloutForbidden, nil), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRolloutEnv(t)
			p := testPlan()
			p.Phases = p.Phases[:1]
			r.preflight(func(int) []rolloutplan.Violation { return nil })
			tries, fixed := 0, false
			r.env.OnActivity(rol.EnableRolloutPhase, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.PhaseInput) (rolloutplan.PhaseChange, error) {
				if !fixed {
					tries++
					return rolloutplan.PhaseChange{}, tc.err
				}
				r.record("enable", "canary")
				return rolloutplan.PhaseChange{Phase: "canary", Nodes: []rolloutplan.NodeChange{{Node: "canary-0", Previous: "plugin", HadLabel: true, PluginDevices: 8}}}, nil
			})
			r.gates(func(int, int) []string { return nil })
			blocked := r.stateAt(time.Hour)
			r.env.RegisterDelayedCallback(func() { fixed = true }, time.Hour+time.Second)
			r.update(time.Hour+2*time.Second, api.UpdateRolloutResume, rolloutplan.Command{Actor: "alice", Reason: "RBAC fixed"}, true)
			st := r.run(api.RolloutInput{Plan: p})
			if blocked.State != rolloutplan.StateBlocked || countLog(*blocked, "enable of phase canary failed: "+tc.says+";") != 1 {
				t.Fatalf("an hour in: %s, log %+v", blocked.State, blocked.Log)
			}
			if tries != tc.tries {
				t.Fatalf("enable tried %d times, want %d", tries, tc.tries)
			}
			if st.State != rolloutplan.StateCompleted {
				t.Fatalf("after resume: %s", st.State)
			}
			r.wantCalls("preflight:canary", "preflight:canary", "enable:canary", "gates:canary")
		})
	}
}

// A rollback whose undo keeps failing holds the rollout blocked with the rollback unfinished; the
// phase stays enabled (and blocked to new claims), and a resume runs the rollback again.
func TestRolloutRollbackThatFailsIsRetriedOnResume(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases = p.Phases[:1]
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.gates(func(int, int) []string { return []string{"drift"} })
	broken := true
	r.env.OnActivity(rol.UndoRolloutPhase, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.UndoInput) (rollouts.UndoResult, error) {
		if broken {
			return rollouts.UndoResult{}, errors.New("connection refused")
		}
		r.record("undo", in.Change.Phase)
		return rollouts.UndoResult{Returned: []string{in.Change.Nodes[0].Node}}, nil
	})
	r.rollbackActs() // its undo comes second: the one above answers
	stuck := r.stateAt(time.Hour)
	r.env.RegisterDelayedCallback(func() { broken = false }, time.Hour+time.Second)
	r.update(time.Hour+2*time.Second, api.UpdateRolloutResume, rolloutplan.Command{Actor: "alice"}, true)
	rolledBack := r.stateAt(time.Hour + time.Minute)
	r.env.RegisterDelayedCallback(r.env.CancelWorkflow, 2*time.Hour)
	r.env.ExecuteWorkflow(RolloutWorkflow, api.RolloutInput{Plan: p})
	if stuck.State != rolloutplan.StateBlocked || stuck.Unfinished == nil || len(stuck.Enabled) != 1 || countLog(*stuck, "did not finish") != 1 {
		t.Fatalf("an hour in: %s, unfinished %+v, enabled %d", stuck.State, stuck.Unfinished, len(stuck.Enabled))
	}
	if rolledBack.State != rolloutplan.StateRolledBack || rolledBack.Unfinished != nil || len(rolledBack.Enabled) != 0 {
		t.Fatalf("after resume: %s, unfinished %+v, enabled %d", rolledBack.State, rolledBack.Unfinished, len(rolledBack.Enabled))
	}
	if n := strings.Count(strings.Join(r.calls, " "), "block:"); n != 2 {
		t.Fatalf("calls %v: want the block tried again with the undo", r.calls)
	}
}

// A rollback sent while a failed gate's rollback proves its block is refused with the reason:
// accepted, it would be cleared by the rollback under way, and the earlier phase left enabled.
func TestRolloutRollbackDuringAGateRollbackIsRefused(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.gates(func(phase, _ int) []string {
		if phase == 1 {
			return []string{"drift"}
		}
		return nil
	})
	r.env.OnActivity(rol.BlockNewClaims, mock.Anything, mock.Anything).After(time.Minute).Return(nil)
	r.rollbackActs()
	r.update(15*time.Minute, api.UpdateRolloutApprove, rolloutplan.Command{Actor: "alice", Phase: "canary"}, true)
	// canary: 10 min soak, approved at 15 min; wide: enabled then, its gates fail at 35 min.
	blocking := r.stateAt(35*time.Minute + 30*time.Second)
	r.update(35*time.Minute+31*time.Second, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "bob", Reason: "stop everything"}, false)
	r.env.RegisterDelayedCallback(r.env.CancelWorkflow, 40*time.Minute)
	r.env.ExecuteWorkflow(RolloutWorkflow, api.RolloutInput{Plan: p})
	if blocking.State != rolloutplan.StateBlocking || len(blocking.Enabled) != 2 {
		t.Fatalf("during the gate's rollback: %s with %d phases enabled", blocking.State, len(blocking.Enabled))
	}
}

// An enable that fails after it may have switched nodes leaves a partial change: the rollback
// sent then routes back, by the phase's selector, whatever the enable switched.
func TestRolloutRollbackUndoesAFailedEnable(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases = p.Phases[:1]
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.env.OnActivity(rol.EnableRolloutPhase, mock.Anything, mock.Anything).Return(rolloutplan.PhaseChange{},
		temporal.NewNonRetryableApplicationError("nodes is forbidden", rollouts.ErrRolloutForbidden, nil))
	var undone []rollouts.UndoInput
	r.env.OnActivity(rol.BlockNewClaims, mock.Anything, mock.Anything).Return(nil)
	r.env.OnActivity(rol.UndoRolloutPhase, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.UndoInput) (rollouts.UndoResult, error) {
		undone = append(undone, in)
		return rollouts.UndoResult{Returned: []string{"canary-0"}}, nil
	})
	blocked := r.stateAt(time.Minute)
	r.update(time.Minute+time.Second, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "alice", Reason: "give the nodes back"}, true)
	rolledBack := r.stateAt(2 * time.Minute)
	r.env.RegisterDelayedCallback(r.env.CancelWorkflow, 3*time.Minute)
	r.env.ExecuteWorkflow(RolloutWorkflow, api.RolloutInput{Plan: p})
	if blocked.State != rolloutplan.StateBlocked || len(blocked.Enabled) != 1 || !blocked.Enabled[0].Partial {
		t.Fatalf("after the failed enable: %s, enabled %+v", blocked.State, blocked.Enabled)
	}
	if len(undone) != 1 || !undone[0].Change.Partial || undone[0].Selector != "pool=a" {
		t.Fatalf("undo calls %+v: want one of the partial change, by the phase's selector", undone)
	}
	if rolledBack.State != rolloutplan.StateRolledBack || len(rolledBack.Enabled) != 0 {
		t.Fatalf("after the rollback: %s, enabled %+v", rolledBack.State, rolledBack.Enabled)
	}
}
