package workflows

import (
	"context"
	"github.com/devicewarden/devicewarden/api"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// onePhase is a one-phase rollout (10 min soak, 1 h rollback hold) that passes preflight.
func onePhase(t *testing.T) (*rolloutEnv, rolloutplan.Plan) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases = p.Phases[:1]
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.rollbackActs()
	return r, p
}

// gatesWaiting answers the gates with a query gate waiting for data for the first n measurements.
func (r *rolloutEnv) gatesWaiting(n int) {
	calls := 0
	r.env.OnActivity(rol.EvaluateRolloutGates, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.GateInput) (rolloutplan.Report, error) {
		r.record("gates", in.Plan.Phases[in.Phase].Name)
		if calls++; calls <= n {
			return rolloutplan.Report{Phase: "canary", Waiting: []string{"query errors: no data (NaN), onNoData: wait"}}, nil
		}
		return rolloutplan.Report{Phase: "canary", Claims: 3}, nil
	})
}

// A query gate that waits for data is measured again every GateRemeasure; once the data comes
// and the gates pass, the phase passes. The waiting measurements are not kept as reports.
func TestRolloutGateWaitsForData(t *testing.T) {
	r, p := onePhase(t)
	r.gatesWaiting(2)
	st := r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "gates:canary", "gates:canary")
	if st.State != rolloutplan.StateCompleted || len(st.Reports) != 1 || !st.Reports[0].Passed() {
		t.Fatalf("state %s, reports %+v", st.State, st.Reports)
	}
	if !st.GatesWaitUntil.IsZero() {
		t.Fatalf("the wait's bound outlived it: %s", st.GatesWaitUntil)
	}
}

// Data that never comes fails the gate after one soak of waiting: the phase is rolled back, not
// held forever.
func TestRolloutGateWaitingForeverFails(t *testing.T) {
	r, p := onePhase(t)
	r.gatesWaiting(1 << 30)
	st := r.run(api.RolloutInput{Plan: p})
	if st.State != rolloutplan.StateRolledBack {
		t.Fatalf("state %s, want rolled back", st.State)
	}
	// 10 min of waiting, measured every 30 s: the first measurement and 20 more.
	if n := strings.Count(strings.Join(r.calls, " "), "gates:canary"); n != 21 {
		t.Fatalf("%d measurements, want 21", n)
	}
	last := st.Reports[len(st.Reports)-1]
	if len(st.Reports) != 1 || len(last.Failed) != 1 || !strings.Contains(last.Failed[0], "still no data after waiting one soak") {
		t.Fatalf("reports %+v", st.Reports)
	}
}

// Gates that cannot be measured are not passed, and the rollout is not lost: the phase is rolled
// back with the reason. A measurement that no retry can make is tried once.
func TestRolloutGatesThatCannotBeMeasuredRollBack(t *testing.T) {
	r, p := onePhase(t)
	r.env.OnActivity(rol.EvaluateRolloutGates, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.GateInput) (rolloutplan.Report, error) {
		r.record("gates", in.Plan.Phases[in.Phase].Name)
		return rolloutplan.Report{}, temporal.NewNonRetryableApplicationError("plan gpu has no phase 3", rollouts.ErrInvalidGateInput, nil)
	})
	st := r.run(api.RolloutInput{Plan: p})
	if st.State != rolloutplan.StateRolledBack {
		t.Fatalf("state %s, want rolled back", st.State)
	}
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "block:canary=gpu-a", "undo:canary=plugin")
	if countLog(st, "its gates could not be measured") == 0 {
		t.Fatalf("log %+v", st.Log)
	}
}

// A rollback sent while the rollout is rolled back, with an earlier phase still enabled, is
// acted on: the earlier phase is rolled back too, and the command is answered once it is.
func TestRolloutRollbackWhileRolledBackIsActedOn(t *testing.T) {
	r := newRolloutEnv(t)
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.rollbackActs()
	r.gates(func(phase, _ int) []string {
		if phase == 1 {
			return []string{"drift"}
		}
		return nil
	})
	r.update(11*time.Minute, api.UpdateRolloutApprove, rolloutplan.Command{Actor: "sre", Phase: "canary"}, true)
	// wide: enabled at 11 min, soaks 20 min, fails its gates and is rolled back at 31 min.
	r.update(40*time.Minute, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "sre", Reason: "all of it"}, true)
	st := r.run(api.RolloutInput{Plan: testPlan()})
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "ask:canary>wide", "preflight:wide", "enable:wide", "gates:wide",
		"block:wide=gpu-b", "undo:wide=plugin", "block:canary=gpu-a", "undo:canary=plugin")
	if st.State != rolloutplan.StateRolledBack || len(st.Enabled) != 0 {
		t.Fatalf("state %s with %d phases enabled", st.State, len(st.Enabled))
	}
	if ans, ok := r.answers[api.UpdateRolloutRollback]; !ok || len(ans.Enabled) != 0 {
		t.Fatalf("rollback answered %v: %+v", ok, ans)
	}
}

// A window that finds the rollout's last run ended starts nothing: after a completed run it does
// nothing; after one that rolled back or was terminated it fails, so the Schedule pauses.
func TestRolloutWindowAfterTheRunEnded(t *testing.T) {
	for state, wantErr := range map[rolloutplan.State]bool{rolloutplan.StateCompleted: false, rolloutplan.StateRolledBack: true, rolloutplan.StateTerminated: true} {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		env.RegisterWorkflow(RolloutWindowWorkflow)
		registerActivities(env)
		env.OnActivity(rol.OpenRolloutWindow, mock.Anything, mock.Anything).Return(api.OpenWindowResult{State: state, Ended: true}, nil)
		env.ExecuteWorkflow(RolloutWindowWorkflow, api.RolloutWindowInput{Plan: testPlan(), Window: policy.JSONDuration(time.Hour)})
		err := env.GetWorkflowError()
		if (err != nil) != wantErr || wantErr && !strings.Contains(err.Error(), "ended "+string(state)+": the schedule pauses") {
			t.Errorf("ended %s: error %v, want error %t", state, err, wantErr)
		}
	}
}

// A rollback sent while the gates are being measured (a slow Prometheus) is acted on at once: the
// measurement is cancelled and the phase rolled back, without waiting for it.
func TestRolloutRollbackWhileGatesAreMeasured(t *testing.T) {
	r, p := onePhase(t)
	r.env.OnActivity(rol.EvaluateRolloutGates, mock.Anything, mock.Anything).After(90 * time.Second).Return(func(_ context.Context, in api.GateInput) (rolloutplan.Report, error) {
		r.record("gates", in.Plan.Phases[in.Phase].Name)
		return rolloutplan.Report{Phase: "canary", Claims: 3}, nil
	})
	// canary: enabled at 0, soaks 10 min, measured from 10 min for 90 s.
	r.update(10*time.Minute+5*time.Second, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "sre", Reason: "stop"}, true)
	st := r.run(api.RolloutInput{Plan: p})
	// The test environment still runs the cancelled mock to its end (its "gates" call comes last);
	// the rollback came before it, and its report was never taken.
	if got := strings.Join(r.calls, " "); !strings.HasPrefix(got, "preflight:canary enable:canary block:canary=gpu-a undo:canary=plugin") {
		t.Fatalf("calls %s: the rollback waited for the measurement", got)
	}
	if st.State != rolloutplan.StateRolledBack || len(st.Reports) != 0 || countLog(st, "measuring its gates stopped for a command") != 1 {
		t.Fatalf("state %s, reports %+v, log %+v", st.State, st.Reports, st.Log)
	}
	if ans, ok := r.answers[api.UpdateRolloutRollback]; !ok || len(ans.Enabled) != 0 {
		t.Fatalf("rollback answered %v: %+v", ok, ans)
	}
}

// A pause sent while the gates are measured holds the rollout at once; after the resume the gates
// are measured again, and the phase passes on that measurement.
func TestRolloutPauseWhileGatesAreMeasured(t *testing.T) {
	r, p := onePhase(t)
	r.env.OnActivity(rol.EvaluateRolloutGates, mock.Anything, mock.Anything).After(90*time.Second).Return(rolloutplan.Report{Phase: "canary", Claims: 3}, nil)
	r.update(10*time.Minute+5*time.Second, api.UpdateRolloutPause, rolloutplan.Command{Actor: "sre"}, true)
	paused := r.stateAt(15 * time.Minute)
	r.update(20*time.Minute, api.UpdateRolloutResume, rolloutplan.Command{Actor: "sre"}, true)
	st := r.run(api.RolloutInput{Plan: p})
	if !paused.Paused || paused.Step != rolloutplan.StepGates {
		t.Fatalf("at 15 min: paused %v at %s", paused.Paused, paused.Step)
	}
	if st.State != rolloutplan.StateCompleted || len(st.Reports) != 1 || countLog(st, "measuring its gates stopped for a command") != 1 {
		t.Fatalf("state %s, reports %d, log %+v", st.State, len(st.Reports), st.Log)
	}
}
