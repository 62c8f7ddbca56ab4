package workflows

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/hygiene"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/capacity"
)

// hygieneModel is one claim as the scanner and the apiserver see it, the breaker, and what the
// claim-hygiene workflow did to it.
type hygieneModel struct {
	carrier
	simLog
	mu          sync.Mutex
	kind        string // the claim's finding now ("" when it is fine)
	deletable   bool
	gone        bool // deleted, by the workflow or by someone else
	breakerOpen bool
	// faults: the next calls fail before acting; lost: the next delete acts, then fails.
	faults, lost int
	// told is the finding the workflow last learned (from its input or a look).
	told                      capacity.Finding
	permits, deleted, deletes int
	recorded                  []string
	final                     *api.ClaimHygieneStatus
}

// finding is the claim's finding now.
func (m *hygieneModel) finding() capacity.Finding {
	f := leakFinding(m.kind, m.kind == capacity.FindingLeaked && m.deletable)
	if m.kind == capacity.FindingNone {
		f.Reason = ""
	}
	return f
}

func (m *hygieneModel) fault(name string) error {
	if m.faults > 0 {
		m.faults--
		m.note("  %s failed", name)
		return errors.New("apiserver unavailable")
	}
	m.note("  %s", name)
	return nil
}

func (m *hygieneModel) activities(env *testsuite.TestWorkflowEnvironment) {
	registerActivities(env)
	on := func(name string, fn any) { env.OnActivity(name, mock.Anything, mock.Anything).Return(fn).Maybe() }
	on("RecordClaimFinding", func(_ context.Context, f capacity.Finding) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.fault("RecordClaimFinding " + f.Kind); err != nil {
			return err
		}
		if n := len(m.recorded); n > 0 && m.recorded[n-1] == f.Kind {
			m.violate("finding %q recorded twice in a row", f.Kind)
		}
		m.recorded = append(m.recorded, f.Kind)
		return nil
	})
	on("AcquirePermit", func(_ context.Context, in remediation.PermitInput) (breaker.PermitResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if in.Action != breaker.ClaimDeleted {
			m.violate("a permit asked for %s", in.Action)
		}
		if m.breakerOpen {
			return breaker.PermitResult{Reason: "circuit breaker open: simulated"}, nil
		}
		m.permits++
		return breaker.PermitResult{Granted: true}, nil
	})
	on("DeleteLeakedClaim", func(ctx context.Context, in hygiene.HygieneInput) (hygiene.ClaimCheck, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if activity.GetInfo(ctx).Attempt == 1 {
			m.deletes++ // a retry is the same deletion
		}
		if err := m.fault("DeleteLeakedClaim"); err != nil {
			return hygiene.ClaimCheck{}, err
		}
		if m.deletes > m.permits {
			m.violate("a deletion asked without a granted permit (%d asked, %d permits)", m.deletes, m.permits)
		}
		if !m.told.Deletable {
			m.violate("a deletion asked while the last look found %q, not a deletable leak", m.told.Kind)
		}
		// The activity looks afresh and deletes only a deletable leak, at its UID and version.
		switch {
		case m.gone:
			return hygiene.ClaimCheck{Gone: true}, nil
		case m.kind != capacity.FindingLeaked || !m.deletable:
			m.told = m.finding()
			return hygiene.ClaimCheck{Finding: m.told}, nil
		}
		m.gone = true
		m.deleted++
		if m.lost > 0 {
			m.lost--
			m.note("  deleted, result lost")
			return hygiene.ClaimCheck{}, errors.New("connection reset after the delete")
		}
		return hygiene.ClaimCheck{Deleted: true}, nil
	})
	on("InspectClaim", func(context.Context, hygiene.HygieneInput) (hygiene.ClaimCheck, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.fault("InspectClaim"); err != nil {
			return hygiene.ClaimCheck{}, err
		}
		if m.gone {
			return hygiene.ClaimCheck{Gone: true}, nil
		}
		m.told = m.finding()
		return hygiene.ClaimCheck{Finding: m.told}, nil
	})
}

func hygieneSteps(rt *rapid.T, m *hygieneModel) []step {
	n := rapid.IntRange(1, 30).Draw(rt, "steps")
	var steps []step
	tl := &timeline{at: time.Second}
	for i := range n {
		gap := rapid.SampledFrom([]time.Duration{0, 30 * time.Second, time.Minute, 5 * time.Minute}).Draw(rt, fmt.Sprintf("gap%d", i))
		s := step{at: tl.next(gap)}
		switch rapid.SampledFrom([]string{"claim", "claim", "breaker", "fault", "lost", "gone", "continue-as-new"}).Draw(rt, fmt.Sprintf("kind%d", i)) {
		case "claim":
			kind := rapid.SampledFrom([]string{capacity.FindingNone, capacity.FindingLeaked, capacity.FindingStuck, capacity.FindingNodeLost}).Draw(rt, fmt.Sprintf("finding%d", i))
			deletable := rapid.Bool().Draw(rt, fmt.Sprintf("deletable%d", i))
			s.what = fmt.Sprintf("the claim is now %q (deletable %v)", kind, deletable)
			s.do = func(*testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				m.kind, m.deletable = kind, deletable
				m.mu.Unlock()
			}
		case "breaker":
			open := rapid.Bool().Draw(rt, fmt.Sprintf("open%d", i))
			s.what = fmt.Sprintf("breaker open %v", open)
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.breakerOpen = open; m.mu.Unlock() }
		case "fault":
			k := rapid.IntRange(1, 3).Draw(rt, fmt.Sprintf("faults%d", i))
			s.what = fmt.Sprintf("the next %d calls fail", k)
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.faults = k; m.mu.Unlock() }
		case "lost":
			s.what = "the next deletion's result is lost"
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.lost = 1; m.mu.Unlock() }
		case "gone":
			s.what = "someone deletes the claim"
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.gone = true; m.mu.Unlock() }
		case "continue-as-new":
			s = continueAsNewStep(tl)
		}
		steps = append(steps, s)
	}
	return steps
}

// checkHygiene holds the workflow's state after a step.
func (m *hygieneModel) checkHygiene(env *testsuite.TestWorkflowEnvironment, after string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stepped(env, after)
	if m.deleted > 1 {
		m.violate("the claim was deleted %d times", m.deleted)
	}
	var st api.ClaimHygieneStatus
	if m.look(env, after, &st) {
		m.note("  state %s held %q checks %d", st.State, st.Held, st.Checks)
	}
}

// TestSimulateClaimHygiene runs generated sequences through one claim's hygiene workflow: the
// claim turning leaked (deletable or not), stuck, on a lost node, fine, or deleted by someone
// else; the breaker opening and closing; failing calls, a deletion whose result was lost, and
// continue-as-new (suggested, and after a few rechecks), holding it to: a deletion only after a
// granted permit and a look that found a deletable leak; the claim deleted at most once; no
// finding recorded twice in a row, across runs; the query answers; and its end says what
// happened (deleted only when it deleted the claim, gone only when the claim is gone, resolved
// only when the claim is fine).
func TestSimulateClaimHygiene(t *testing.T) {
	simulate(t, 300, hygieneProperty)
	t.Logf("ends: %v", hygieneEnds)
}

func hygieneProperty(rt *rapid.T) {
	m := &hygieneModel{kind: rapid.SampledFrom([]string{capacity.FindingLeaked, capacity.FindingStuck, capacity.FindingNodeLost}).Draw(rt, "first"),
		deletable: rapid.Bool().Draw(rt, "deletable")}
	m.told = m.finding()
	in := api.ClaimHygieneInput{Finding: m.told, Policy: capacity.HygienePolicy{DeleteLeaked: true}, Recheck: time.Minute,
		RechecksPerRun: rapid.IntRange(1, 6).Draw(rt, "rechecksPerRun")}
	steps := hygieneSteps(rt, m)
	m.ended = func(env *testsuite.TestWorkflowEnvironment) {
		var st api.ClaimHygieneStatus
		if env.GetWorkflowError() == nil && env.GetWorkflowResult(&st) == nil {
			m.final = &st
		}
	}
	end := steps[len(steps)-1].at + 10*time.Minute
	if err := segments(rt, &m.carrier, ClaimHygieneWorkflow, in, false, end, steps, quietEnv(m.activities), m.checkHygiene); err != nil {
		m.violate("the workflow failed: %v", err)
	}
	// An activity the environment still retries after the run ended may touch the model: the end
	// is judged under its lock.
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.final; st != nil {
		m.note("ended %s", st.State)
		switch {
		case st.State == api.HygieneDeleted && m.deleted != 1:
			m.violate("ended deleted, but it deleted the claim %d times", m.deleted)
		case st.State == api.HygieneGone && !m.gone:
			m.violate("ended gone, but the claim is there")
		case st.State == api.HygieneResolved && (m.gone || m.told.Kind != capacity.FindingNone):
			m.violate("ended resolved, but its last look found %q (gone %v)", m.told.Kind, m.gone)
		}
	}
	hygieneEnds[stateOf(m.final)]++
	m.fail(rt)
}

// hygieneEnds counts how the simulated workflows ended, to show what the sequences reach.
var hygieneEnds = map[string]int{}

func stateOf(st *api.ClaimHygieneStatus) string {
	if st == nil {
		return "still following"
	}
	return st.State
}
