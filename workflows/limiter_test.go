package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// The limiter grants in order under the per-node cap, and a migration that is gone when its turn
// comes loses its slot to the next one.
func TestMigrationLimiter(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	var granted []string
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalSlotGranted, mock.Anything).Return(
		func(_, id, _, _ string, _ any) error {
			if id == "gone" {
				return errors.New("unknown external workflow execution")
			}
			granted = append(granted, id)
			return nil
		})
	send := func(at time.Duration, name string, arg any) {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(name, arg) }, at)
	}
	req := func(id string) migrationplan.SlotRequest {
		return migrationplan.SlotRequest{ID: id, Node: "node-1", PerNode: 1, ClusterWide: 10}
	}
	send(time.Second, api.SignalSlotAcquire, req("m1"))
	send(2*time.Second, api.SignalSlotAcquire, req("gone"))
	send(3*time.Second, api.SignalSlotAcquire, req("m3"))
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(api.QueryState)
		var st migrationplan.SlotState
		if err != nil || v.Get(&st) != nil || len(st.Holders) != 1 || st.Position("m3") != 2 {
			t.Errorf("state %+v (%v): m1 holds, gone and m3 wait", st, err)
		}
	}, 4*time.Second)
	send(5*time.Second, api.SignalSlotRelease, "m1")
	env.RegisterDelayedCallback(func() {
		v, _ := env.QueryWorkflow(api.QueryState)
		var st migrationplan.SlotState
		_ = v.Get(&st)
		if len(st.Holders) != 1 || st.Holders[0].ID != "m3" || st.MaxOnNode != 1 {
			t.Errorf("after m1: %+v, want m3 holding", st)
		}
		env.CancelWorkflow()
	}, 6*time.Second)
	env.ExecuteWorkflow(MigrationLimiterWorkflow, api.LimiterInput{})
	if got := len(granted); got != 2 || granted[0] != "m1" || granted[1] != "m3" {
		t.Fatalf("granted %v, want m1 then m3", granted)
	}
}

// Asked to continue as new, the limiter carries its holders and queue into the next run once no
// signal waits.
func TestMigrationLimiterContinuesAsNew(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalSlotGranted, mock.Anything).Return(nil)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(api.SignalSlotAcquire, migrationplan.SlotRequest{ID: "m1", Node: "n", PerNode: 1, ClusterWide: 1})
		env.SignalWorkflow(api.SignalSlotAcquire, migrationplan.SlotRequest{ID: "m2", Node: "n", PerNode: 1, ClusterWide: 1})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SetContinueAsNewSuggested(true)
		env.SignalWorkflow(api.SignalSlotRelease, "nobody")
	}, 2*time.Second)
	env.ExecuteWorkflow(MigrationLimiterWorkflow, api.LimiterInput{})
	var next api.LimiterInput
	continuedAs(t, env, &next)
	if next.State == nil || len(next.State.Holders) != 1 || next.State.Holders[0].ID != "m1" || next.State.Position("m2") != 1 {
		t.Fatalf("next run's state %+v", next.State)
	}
}
