//go:build !race

package workflows

// The month-long runs are kept out of the race detector's run (make test runs them without it):
// their cost is the simulated month, and they start no goroutines of their own.

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// month is how long the history-bound tests run each long-lived loop.
const month = 30 * 24 * time.Hour

// meter estimates a run's history length in the test environment, which keeps none, and hands it
// to the workflow as its current history length. An activity is 6 events (scheduled, started,
// completed, and the workflow task its result wakes: scheduled, started, completed), a timer 5
// (started, fired, a workflow task), a local activity 1 (its marker, written in the task that ran
// it). A poll of a timer and an activity is then 11 events and a permit asked between timers 6:
// what the recorded histories rollout_continued_2 and migrate_continued_1 show.
type meter struct {
	env *testsuite.TestWorkflowEnvironment
	n   int
}

func newMeter(env *testsuite.TestWorkflowEnvironment) *meter {
	m := &meter{env: env}
	m.add(5) // started, and the first workflow task
	env.SetOnActivityStartedListener(func(*activity.Info, context.Context, converter.EncodedValues) { m.add(6) })
	env.SetOnTimerScheduledListener(func(string, time.Duration) { m.add(5) })
	env.SetOnLocalActivityStartedListener(func(*activity.Info, context.Context, []any) { m.add(1) })
	return m
}

func (m *meter) add(k int) {
	m.n += k
	m.env.SetCurrentHistoryLength(m.n)
}

// monthOfRuns runs workflow fn for a month of simulated time, each run continuing as new into
// the next. newEnv builds a fresh environment for a run (one workflow per test environment) with
// its activities mocked. It returns the number of runs, the longest history of any, and the input
// the last run continued with.
func monthOfRuns[In any](t *testing.T, fn any, first In, newEnv func() *testsuite.TestWorkflowEnvironment) (runs, longest int, last In) {
	t.Helper()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at, in := t0, first
	for at.Sub(t0) < month {
		env := newEnv()
		env.SetStartTime(at)
		m := newMeter(env)
		env.ExecuteWorkflow(fn, in)
		var can *workflow.ContinueAsNewError
		if err := env.GetWorkflowError(); !errors.As(err, &can) {
			t.Fatalf("run %d, %s in: want continue-as-new, got %v", runs+1, at.Sub(t0), err)
		}
		var next In
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			t.Fatal(err)
		}
		runs++
		longest = max(longest, m.n)
		at, in = env.Now(), next
	}
	return runs, longest, in
}

// A rollout rolled back while a month-long job holds one of its nodes looks at that node every
// 15 s for the month: each run continues as new before its history reaches the bound, and the last
// run still drains the node and still ends at the first run's deadline.
func TestRolloutHeldForAMonthBoundsItsHistory(t *testing.T) {
	hold := 45 * 24 * time.Hour
	var p rolloutplan.Plan
	newEnv := func() *testsuite.TestWorkflowEnvironment {
		r, plan := heldRollback(t, hold, 1<<30)
		p = plan
		return r.env
	}
	newEnv()
	runs, longest, last := monthOfRuns(t, RolloutWorkflow, api.RolloutInput{Plan: p}, newEnv)
	t.Logf("30 days held: %d runs, longest history %d events (bound %d)", runs, longest, historyBound)
	if longest > historyBound+11 || runs < 2 {
		t.Fatalf("%d runs, longest history %d events: want several runs, each within %d", runs, longest, historyBound)
	}
	st := last.State
	if st == nil || st.State != rolloutplan.StateRolledBack || len(st.Draining) != 1 {
		t.Fatalf("after a month: %+v", st)
	}
	if d := st.HoldUntil.Sub(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)); d < hold || d > hold+time.Hour {
		t.Fatalf("hold deadline moved: %s after the start, want the first run's %s plus the soak", d, hold)
	}
}

// A migration that waits a month for a slot that never comes asks again every 10 minutes: each
// run continues as new within the bound and the last still waits, with its start kept.
func TestMigrationWaitingAMonthForASlotBoundsItsHistory(t *testing.T) {
	newEnv := func() *testsuite.TestWorkflowEnvironment { return newMigration(t).env }
	runs, longest, last := monthOfRuns(t, MigrateWorkflow, migrateInput("Job", "annotation", false), newEnv)
	t.Logf("30 days waiting for a slot: %d runs, longest history %d events (bound %d)", runs, longest, historyBound)
	if longest > historyBound+11 || runs < 2 {
		t.Fatalf("%d runs, longest history %d events: want several runs, each within %d", runs, longest, historyBound)
	}
	c := last.Carried
	if c == nil || c.Slot || c.State.Phase != migrationplan.PhaseWaitingForSlot || !c.Started.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("after a month: %+v", c)
	}
}

// A migration holding its slot while the circuit breaker stays open for a month asks every 30 s:
// each run continues as new within the bound, keeping the slot, and nothing is released or moved.
func TestMigrationWaitingAMonthForTheBreakerBoundsItsHistory(t *testing.T) {
	var calls []string
	newEnv := func() *testsuite.TestWorkflowEnvironment {
		h := newMigration(t)
		h.denyPermits = 1 << 30
		h.grant(time.Second)
		t.Cleanup(func() { calls = append(calls, h.calls...) })
		return h.env
	}
	in := migrateInput("Job", "annotation", false)
	in.Carried = &api.MigrationCarry{State: migrationplan.MigrationState{Phase: migrationplan.PhaseWaitingForSlot}, Started: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	runs, longest, last := monthOfRuns(t, MigrateWorkflow, in, newEnv)
	t.Logf("30 days waiting for the breaker: %d runs, longest history %d events (bound %d)", runs, longest, historyBound)
	if longest > historyBound+11 || runs < 2 {
		t.Fatalf("%d runs, longest history %d events: want several runs, each within %d", runs, longest, historyBound)
	}
	if c := last.Carried; c == nil || !c.Slot || c.State.Phase != migrationplan.PhaseWaitingForBreaker {
		t.Fatalf("after a month: %+v", c)
	}
}
