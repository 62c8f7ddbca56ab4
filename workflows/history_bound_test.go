package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// A person's migrate-anyway is carried across continue-as-new: the next run moves the workload on
// that word, without asking again or keeping evidence twice.
func TestMigrateAnywayIsCarriedToTheNextRun(t *testing.T) {
	h := newMigration(t)
	h.env.SetContinueAsNewSuggested(true)
	h.denyPermits = 1
	decideOn(t, h, time.Minute, api.UpdateMigrateAnyway, migrationplan.MigrationDecision{Actor: "bob", Reason: "results are in the bucket"}, "")
	h.grant(2 * time.Minute)
	h.env.ExecuteWorkflow(MigrateWorkflow, migrateInput("Pod", "none", false))
	var next api.MigrateInput
	continuedAs(t, h.env, &next)
	if c := next.Carried; c == nil || c.Anyway != migrationplan.MoveEvict || !c.Slot || c.State.Actor != "bob" {
		t.Fatalf("carried %+v", next.Carried)
	}
	if got := h.called("PreserveEvidence", "EvictPod", "ReleaseMigrationLease", "ReleaseMigrationSlot"); got != "PreserveEvidence" {
		t.Fatalf("first run's calls %s: the lease and the slot go to the next run", got)
	}
	h2 := newMigration(t)
	st := h2.run(t, next)
	if st.Outcome != migrationplan.OutcomeMigrated || st.Actor != "bob" {
		t.Fatalf("second run: %+v", st)
	}
	if got := h2.called("TakeMigrationLease", "PreserveEvidence", "RequestMigrationSlot", "EvictPod"); got != "TakeMigrationLease,EvictPod" {
		t.Fatalf("second run's calls %s", got)
	}
}

// A run continued from a rolled-back one holds to the deadline it was given, not a new
// rollbackHold, and takes a resume as the first run would.
func TestRolloutContinuedWhileRolledBack(t *testing.T) {
	carried := func(r *rolloutEnv) api.RolloutInput {
		p := testPlan()
		return api.RolloutInput{Plan: p, State: &api.RolloutStatus{Plan: p.Name, Step: rolloutplan.StepPreflight, State: rolloutplan.StateRolledBack,
			HoldUntil: r.env.Now().Add(10 * time.Minute)}}
	}
	r := newRolloutEnv(t)
	in := carried(r)
	start := r.env.Now()
	st := r.run(in)
	if took := r.env.Now().Sub(start); st.State != rolloutplan.StateRolledBack || took != 10*time.Minute {
		t.Fatalf("ended %s after %s, want rolled back at the carried deadline (10m)", st.State, took)
	}

	r = newRolloutEnv(t)
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.gates(func(int, int) []string { return nil })
	r.update(time.Minute, api.UpdateRolloutResume, rolloutplan.Command{Actor: "alice"}, true)
	r.update(15*time.Minute, api.UpdateRolloutApprove, rolloutplan.Command{Actor: "alice", Phase: "canary"}, true)
	if st := r.run(carried(r)); st.State != rolloutplan.StateCompleted {
		t.Fatalf("after resume: %s, want completed", st.State)
	}
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "ask:canary>wide", "preflight:wide", "enable:wide", "gates:wide")
}

// A breaker run of a release before the history bound (no open-denies-all marker, as 18bd934's)
// continues as new when the server suggests it, never at historyBound: it did not, and replayed
// here with a long history and the suggestion off it must wait on as recorded (#40, defect 5).
// A run of this code continues at the bound. Before, both continued at the bound.
func TestOldBreakerRunsIgnoreTheBound(t *testing.T) {
	for _, old := range []bool{true, false} {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		registerActivities(env)
		env.OnActivity("Alert", mock.Anything, mock.Anything).Return(nil)
		if old {
			env.OnGetVersion("open-denies-all", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
		}
		env.SetCurrentHistoryLength(historyBound + 1)
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(api.SignalBreakerPause, api.BreakerSignal{Actor: "bob", Reason: "maintenance"})
		}, time.Minute)
		env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
		env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{})
		var can *workflow.ContinueAsNewError
		continued := errors.As(env.GetWorkflowError(), &can)
		if continued == old {
			t.Errorf("a run of a release before the bound: %v; continued as new at %d events: %v", old, historyBound+1, continued)
		}
	}
}
