package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// migrateModel is the workload and the cluster around one migration: the limiter's answer, the
// breaker, the Lease, the Job's suspension and the Pods' evictions, with faults to inject.
type migrateModel struct {
	carrier
	simLog
	mu          sync.Mutex
	breakerOpen bool
	asked       bool // a slot request waits for the limiter's answer
	slot        bool // the limiter counts the migration as a holder
	permits     int
	leaseTaken  bool // another holder took the Lease after a renewal failed
	leaseHeld   bool
	checkpoint  bool // the workload saved its work
	readyNever  bool // no Pod gets Ready elsewhere
	// slowGone is how many looks a suspended Job's Pods take to go (goneChecks so far).
	slowGone, goneChecks int
	suspended            bool
	// suspensions and resumes count changes of the Job's spec.suspend, evictions each Pod's.
	suspensions, resumes int
	evictions            map[string]int
	// The next faults side-effect calls fail before acting; the next lost act and then fail (the
	// result was lost: the call runs again).
	faults, lost int
	records      []migration.MigrationRecord
	updates      []*simUpdate
	answered     int // decisions answered with the state they left
	final        migrationplan.MigrationState
}

// effect runs act as a side effect under the injected faults: failing before it acts, or acting
// and then losing the result.
func (m *migrateModel) effect(name string, act func()) error {
	if m.faults > 0 {
		m.faults--
		m.note("  %s failed", name)
		return errors.New("apiserver unavailable")
	}
	act()
	if m.lost > 0 {
		m.lost--
		m.note("  %s acted, result lost", name)
		return errors.New("connection reset after the write")
	}
	m.note("  %s", name)
	return nil
}

// moving checks a move is allowed: the migration holds a slot and a permit.
func (m *migrateModel) moving(what string) {
	if !m.slot {
		m.violate("%s without a migration slot", what)
	}
	if m.permits == 0 {
		m.violate("%s without the breaker's permit", what)
	}
}

func (m *migrateModel) activities(env *testsuite.TestWorkflowEnvironment) {
	registerActivities(env)
	on := func(name string, fn any) { env.OnActivity(name, mock.Anything, mock.Anything).Return(fn).Maybe() }
	on("TakeMigrationLease", func(_ context.Context, in migration.LeaseInput) (migration.LeaseResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.leaseTaken {
			return migration.LeaseResult{Holder: "migrate/other"}, nil
		}
		m.leaseHeld = true
		return migration.LeaseResult{Held: true, Holder: in.Holder}, nil
	})
	on("HoldMigrationLease", func(ctx context.Context, _ migration.LeaseInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.leaseTaken {
			m.leaseHeld = false
			return temporal.NewNonRetryableApplicationError("migration lease taken by migrate/other", migration.ErrLeaseLost, nil)
		}
		// It renews until cancelled. The test environment gives an activity without a bound on
		// its attempts 10 of them, so each attempt looks later: the 10 cover two days, and a
		// Lease taken is seen within 10 minutes at first, within hours later.
		n := time.Duration(activity.GetInfo(ctx).Attempt)
		return temporal.NewApplicationErrorWithOptions("renewing", "Renewing", temporal.ApplicationErrorOptions{NextRetryDelay: n * n * 10 * time.Minute})
	})
	on("ReleaseMigrationLease", func(context.Context, migration.LeaseInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.leaseHeld = false
		return nil
	})
	on("RequestMigrationSlot", func(context.Context, migrationplan.SlotRequest) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.effect("RequestMigrationSlot", func() { m.asked = true })
	})
	on("ReleaseMigrationSlot", func(context.Context, string) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.effect("ReleaseMigrationSlot", func() { m.slot, m.asked = false, false })
	})
	on("AcquirePermit", func(context.Context, remediation.PermitInput) (breaker.PermitResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.breakerOpen {
			return breaker.PermitResult{Reason: "circuit breaker open: simulated"}, nil
		}
		m.permits++
		return breaker.PermitResult{Granted: true}, nil
	})
	on("RequestCheckpoint", func(context.Context, migration.CheckpointInput) error { return nil })
	on("WaitCheckpoint", func(context.Context, migration.CheckpointInput) (migration.CheckpointStatus, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.checkpoint {
			return migration.CheckpointStatus{}, later("no answer yet")
		}
		return migration.CheckpointStatus{Done: true}, nil
	})
	on("PreserveEvidence", func(_ context.Context, in migration.EvidenceInput) (string, error) {
		return migration.EvidenceName(in.WorkflowID), nil
	})
	on("WorkloadPods", func(_ context.Context, w api.Workload) ([]migration.PodInfo, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		var out []migration.PodInfo
		for _, p := range w.Pods {
			if m.evictions[p] == 0 && !m.suspended {
				out = append(out, migration.PodInfo{Name: p, UID: "uid-" + p})
			}
		}
		return out, m.effect("WorkloadPods", func() {})
	})
	on("SuspendJob", func(_ context.Context, in migration.SuspendInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if in.Suspend {
			m.moving("a suspension")
		}
		return m.effect(fmt.Sprintf("SuspendJob %v", in.Suspend), func() {
			switch {
			case in.Suspend && !m.suspended:
				m.suspensions++
			case !in.Suspend && m.suspended:
				m.resumes++
			}
			m.suspended = in.Suspend
		})
	})
	on("WaitPodsGone", func(context.Context, migration.WaitGoneInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.suspended || m.goneChecks < m.slowGone {
			m.goneChecks++
			return later("pods still running")
		}
		return nil
	})
	on("EvictPod", func(_ context.Context, in migration.EvictInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.moving("an eviction")
		return m.effect("EvictPod "+in.Pod, func() {
			if in.UID == "uid-"+in.Pod && m.evictions[in.Pod] == 0 {
				m.evictions[in.Pod]++ // the Pod of that UID goes once; a later call finds it gone
			}
		})
	})
	on("WaitWorkloadReady", func(_ context.Context, in migration.ReadyInput) ([]string, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.readyNever {
			return nil, later("not Ready yet")
		}
		return []string{"new-0"}, nil
	})
	on("RecordMigration", func(_ context.Context, rec migration.MigrationRecord) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.records = append(m.records, rec)
		return nil
	})
	on("Alert", func(context.Context, notify.AlertInput) error { return nil })
}

func migrateSteps(rt *rapid.T, m *migrateModel) []step {
	n := rapid.IntRange(1, 30).Draw(rt, "steps")
	var steps []step
	tl := &timeline{at: time.Second}
	for i := range n {
		gap := rapid.SampledFrom([]time.Duration{0, time.Second, 30 * time.Second, 5 * time.Minute, 20 * time.Minute}).Draw(rt, fmt.Sprintf("gap%d", i))
		s := step{at: tl.next(gap)}
		switch rapid.SampledFrom([]string{"grant", "grant", "breaker", "fault", "lost", "lease", "checkpoint", "decide", "decide", "continue-as-new"}).Draw(rt, fmt.Sprintf("kind%d", i)) {
		case "grant":
			s.what = "the limiter grants a slot (when asked)"
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				asked := m.asked
				if asked {
					m.slot, m.asked = true, false
				}
				m.mu.Unlock()
				if asked {
					m.signal(env, api.SignalSlotGranted, nil)
				}
			}
		case "breaker":
			open := rapid.Bool().Draw(rt, fmt.Sprintf("open%d", i))
			s.what = fmt.Sprintf("breaker open %v", open)
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.breakerOpen = open; m.mu.Unlock() }
		case "fault":
			k := rapid.IntRange(1, 3).Draw(rt, fmt.Sprintf("faults%d", i))
			s.what = fmt.Sprintf("the next %d side effects fail", k)
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.faults = k; m.mu.Unlock() }
		case "lost":
			s.what = "the next side effect acts and loses its result"
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.lost = 1; m.mu.Unlock() }
		case "lease":
			s.what = "another holder takes the Lease"
			s.do = func(*testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				m.leaseTaken, m.leaseHeld = true, false
				m.mu.Unlock()
			}
		case "checkpoint":
			s.what = "the workload saves its work"
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.checkpoint = true; m.mu.Unlock() }
		case "decide":
			kind := rapid.SampledFrom([]string{api.UpdateMigrateAnyway, api.UpdateAbandon}).Draw(rt, fmt.Sprintf("decision%d", i))
			actor := rapid.SampledFrom([]string{simActor, simActor, ""}).Draw(rt, fmt.Sprintf("actor%d", i))
			d := migrationplan.MigrationDecision{Actor: actor, Reason: "simulated"}
			s.what = fmt.Sprintf("%s by %q", kind, actor)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				u := &simUpdate{what: s.what}
				m.updates = append(m.updates, u)
				sendUpdate(env, kind, d, u, nil, func(res any, err error) {
					st, ok := res.(migrationplan.MigrationState)
					if ok {
						m.answered++
					}
					if ok && err == nil && st.Outcome != "" && st.Actor != actor {
						m.violate("%s answered with the outcome %s by %q, not by its actor", s.what, st.Outcome, st.Actor)
					}
				})
			}
		case "continue-as-new":
			s = continueAsNewStep(tl)
		}
		steps = append(steps, s)
	}
	return steps
}

// checkMigration holds the migration's state after a step.
func (m *migrateModel) checkMigration(env *testsuite.TestWorkflowEnvironment, after string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stepped(env, after)
	var st migrationplan.MigrationState
	if !m.look(env, after, &st) {
		return
	}
	m.note("  phase %s waiting %q outcome %s", st.Phase, st.Waiting, st.Outcome)
	if st.Phase == migrationplan.PhaseWaitingForDecision && !st.SlotAt.IsZero() && st.SlotFreedAt.Before(st.SlotAt) {
		m.violate("waiting for a person while holding a migration slot (granted %s)", st.SlotAt.Format("15:04:05"))
	}
	if m.suspensions > 1 || m.resumes > 1 {
		m.violate("the Job was suspended %d times and resumed %d times", m.suspensions, m.resumes)
	}
	for p, n := range m.evictions {
		if n > 1 {
			m.violate("pod %s evicted %d times", p, n)
		}
	}
	m.checkRefusals(m.updates)
}

// TestSimulateMigration runs generated sequences through one migration (every workload kind, with
// or without a checkpoint): the limiter's grants, the breaker opening and closing, failing side
// effects and side effects whose result was lost (retried: idempotency), the Lease taken by
// another holder, the workload's checkpoint, migrate-anyway and abandon (signed, unsigned, early,
// late, racing) and continue-as-new, holding it to: no suspension or eviction without a slot and a
// permit; a Job suspended and resumed at most once, each Pod evicted at most once; every refused
// decision says why and every accepted one is answered; the query answers; and at its end the slot
// and the Lease are released, a migrated workload was moved exactly once, and a Job is never left
// suspended without a critical needs-cleanup outcome.
func TestSimulateMigration(t *testing.T) {
	simulate(t, 300, migrateProperty)
	t.Logf("ends: %v", migrateEnds)
}

// migrateEnds counts how the simulated migrations ended, to show what the sequences reach.
var migrateEnds = map[string]int{}

func migrateProperty(rt *rapid.T) {
	m := &migrateModel{evictions: map[string]int{}}
	kind := rapid.SampledFrom([]string{"Job", "JobSet", "Deployment", "Pod"}).Draw(rt, "kind")
	in := migrateInput(kind, rapid.SampledFrom([]string{"none", kubeobj.CheckpointAnnotation}).Draw(rt, "checkpoint"), rapid.Bool().Draw(rt, "shrinkable"))
	in.Workload.Pods = []string{"w-0", "w-1"}[:rapid.IntRange(1, 2).Draw(rt, "pods")]
	in.Policy.CheckpointTimeout = policy.JSONDuration(10 * time.Minute)
	in.Policy.ReadyTimeout = policy.JSONDuration(15 * time.Minute)
	in.Policy.DecisionTimeout = policy.JSONDuration(time.Hour)
	m.readyNever = rapid.IntRange(0, 4).Draw(rt, "readyNever") == 0
	m.slowGone = rapid.IntRange(0, 3).Draw(rt, "slowGone")
	m.ended = func(env *testsuite.TestWorkflowEnvironment) {
		if env.GetWorkflowError() == nil {
			_ = env.GetWorkflowResult(&m.final)
		}
	}
	steps := migrateSteps(rt, m)
	end := steps[len(steps)-1].at + 3*time.Hour
	if err := segments(rt, &m.carrier, MigrateWorkflow, in, false, end, steps, quietEnv(m.activities), m.checkMigration); err != nil {
		m.violate("the workflow failed: %v", err)
	}
	// An activity the environment still retries after the run ended may touch the model: the end
	// is judged under its lock.
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checkEnd()
	ended := "still going"
	if len(m.records) > 0 {
		ended = "cancelled when the sequence ended"
		if rec := m.records[0]; rec.Outcome != "" {
			ended = strings.TrimSuffix(string(rec.Outcome)+" "+string(rec.Class), " ")
		}
	}
	migrateEnds[ended]++
	if m.answered > 0 {
		migrateEnds["decisions answered"] += m.answered
	}
	m.fail(rt)
}

// checkEnd holds a migration that finished to what it leaves behind.
func (m *migrateModel) checkEnd() {
	m.checkAnswered(m.updates)
	if len(m.records) == 0 {
		return // still waiting when the sequence ended
	}
	if len(m.records) > 1 {
		m.violate("the migration was counted %d times", len(m.records))
	}
	rec := m.records[0]
	m.note("ended %s (%s)", rec.Outcome, rec.Class)
	// A grant that reached the migration after it stopped waiting (its Lease lost, or cancelled) is
	// freed by the leader's sweep of gone holders (TestSimulateMigrationLimiter holds the limiter to
	// that); a slot the migration knew it held, it frees itself.
	if st := m.final; !st.SlotAt.IsZero() && st.SlotFreedAt.Before(st.SlotAt) {
		m.violate("the migration ended %s holding its slot (granted %s, freed %s)", rec.Outcome, st.SlotAt.Format("15:04:05"), st.SlotFreedAt.Format("15:04:05"))
	}
	if m.leaseHeld {
		m.violate("the Lease is still held after the migration ended %s", rec.Outcome)
	}
	if m.suspended && rec.Class != migrationplan.FailNeedsCleanup {
		m.violate("the Job is left suspended, but the migration ended %s (%s), not needs-cleanup", rec.Outcome, rec.Class)
	}
	if rec.Outcome == migrationplan.OutcomeMigrated {
		moved := m.suspensions == 1 && m.resumes == 1
		for _, n := range m.evictions {
			moved = moved || n == 1
		}
		if !moved {
			m.violate("migrated, but the Job was suspended %d and resumed %d times and %d Pods evicted", m.suspensions, m.resumes, len(m.evictions))
		}
	}
}
