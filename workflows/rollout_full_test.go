package workflows

import (
	"errors"
	"github.com/devicewarden/devicewarden/api"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// A rollback accepted while the run's history is full is acted on before the run continues as
// new (#40, defect 6). Before, the loop top saw the full history and continueAsNew waited for the
// rollback's handler, which waits for the loop to clear RollbackPending: nothing ran, the phase
// stayed on DRA with no admission block. The test failed with the run never finishing.
func TestRollbackAcceptedWithAFullHistoryIsCarriedOut(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.rollbackActs()
	r.gates(func(int, int) []string { return nil })
	r.env.SetTestTimeout(20 * time.Second)
	r.env.RegisterDelayedCallback(func() { r.env.SetContinueAsNewSuggested(true) }, time.Minute)
	r.update(time.Minute+time.Second, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "sre", Reason: "full history"}, true)
	r.env.ExecuteWorkflow(RolloutWorkflow, api.RolloutInput{Plan: p})
	if !r.env.IsWorkflowCompleted() {
		t.Fatal("the rollout never finished: the rollback was not carried out")
	}
	var can *workflow.ContinueAsNewError
	if err := r.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want the run to continue as new after the rollback, got %v", err)
	}
	r.wantCalls("preflight:canary", "enable:canary", "block:canary=gpu-a", "undo:canary=plugin")
	a, ok := r.answers[api.UpdateRolloutRollback]
	if !ok || a.RollbackPending != nil || a.State != rolloutplan.StateRolledBack {
		t.Fatalf("the rollback was answered %v: %+v", ok, a)
	}
}
