package workflows

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/hygiene"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/capacity"
)

// hygieneEnv runs one claim-hygiene workflow with its activities mocked: looks answers the
// rechecks in turn (the last one repeats), permits the breaker's answers (the last repeats).
type hygieneEnv struct {
	t       *testing.T
	env     *testsuite.TestWorkflowEnvironment
	calls   []string
	looks   []hygiene.ClaimCheck
	permits []bool
	deletes []hygiene.ClaimCheck
}

func leakFinding(kind string, deletable bool) capacity.Finding {
	return capacity.Finding{Kind: kind, Namespace: "t", Claim: "job-0-gpu", UID: "u1", Version: "41", Node: "n1", ShareIDs: []string{"s1"},
		Reason: kind + " reason", Deletable: deletable}
}

func newHygieneEnv(t *testing.T) *hygieneEnv {
	var s testsuite.WorkflowTestSuite
	h := &hygieneEnv{t: t, env: s.NewTestWorkflowEnvironment()}
	h.env.RegisterWorkflow(ClaimHygieneWorkflow)
	registerActivities(h.env)
	next := func(list []hygiene.ClaimCheck) hygiene.ClaimCheck {
		if len(list) == 0 {
			t.Fatal("no answer left")
		}
		return list[0]
	}
	h.env.OnActivity(hyg.RecordClaimFinding, mock.Anything, mock.Anything).Return(func(_ context.Context, f capacity.Finding) error {
		h.calls = append(h.calls, "record:"+f.Kind)
		return nil
	}).Maybe()
	h.env.OnActivity(rem.AcquirePermit, mock.Anything, mock.Anything).Return(func(_ context.Context, in remediation.PermitInput) (breaker.PermitResult, error) {
		if in.Claim != "t/job-0-gpu/u1" || in.Action != breaker.ClaimDeleted {
			t.Errorf("permit asked for %+v", in)
		}
		granted := h.permits[0]
		if len(h.permits) > 1 {
			h.permits = h.permits[1:]
		}
		h.calls = append(h.calls, map[bool]string{true: "permit:granted", false: "permit:denied"}[granted])
		if !granted {
			return breaker.PermitResult{Reason: "circuit breaker open: paused"}, nil
		}
		return breaker.PermitResult{Granted: true}, nil
	}).Maybe()
	h.env.OnActivity(hyg.DeleteLeakedClaim, mock.Anything, mock.Anything).Return(func(_ context.Context, in hygiene.HygieneInput) (hygiene.ClaimCheck, error) {
		if in.UID != "u1" || in.Claim != "job-0-gpu" || !in.Policy.DeleteLeaked {
			t.Errorf("delete asked for %+v", in)
		}
		h.calls = append(h.calls, "delete")
		res := next(h.deletes)
		if len(h.deletes) > 1 {
			h.deletes = h.deletes[1:]
		}
		return res, nil
	}).Maybe()
	h.env.OnActivity(hyg.InspectClaim, mock.Anything, mock.Anything).Return(func(_ context.Context, in hygiene.HygieneInput) (hygiene.ClaimCheck, error) {
		h.calls = append(h.calls, "look")
		res := next(h.looks)
		if len(h.looks) > 1 {
			h.looks = h.looks[1:]
		}
		return res, nil
	}).Maybe()
	return h
}

func (h *hygieneEnv) run(f capacity.Finding) api.ClaimHygieneStatus {
	h.env.ExecuteWorkflow(ClaimHygieneWorkflow, api.ClaimHygieneInput{Finding: f, Policy: capacity.HygienePolicy{DeleteLeaked: true}, Recheck: time.Minute})
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
	var st api.ClaimHygieneStatus
	if err := h.env.GetWorkflowResult(&st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *hygieneEnv) query() api.ClaimHygieneStatus {
	v, err := h.env.QueryWorkflow(api.QueryState)
	if err != nil {
		h.t.Fatal(err)
	}
	var st api.ClaimHygieneStatus
	if err := v.Get(&st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *hygieneEnv) want(calls string) {
	h.t.Helper()
	if got := strings.Join(h.calls, " "); got != calls {
		h.t.Fatalf("calls\n got %s\nwant %s", got, calls)
	}
}

// The fresh look before a deletion finds the Pod came back and is Pending: the workflow shows the
// share stuck from then on, not leaked.
func TestLeakThatTurnsStuckIsShownStuck(t *testing.T) {
	h := newHygieneEnv(t)
	h.permits = []bool{true}
	h.deletes = []hygiene.ClaimCheck{{Finding: leakFinding(capacity.FindingStuck, false)}}
	h.looks = []hygiene.ClaimCheck{{}}
	h.env.RegisterDelayedCallback(func() {
		if st := h.query(); st.State != capacity.FindingStuck {
			t.Errorf("after the fresh look: %+v", st)
		}
	}, 30*time.Second)
	if st := h.run(leakFinding(capacity.FindingLeaked, true)); st.State != api.HygieneResolved {
		t.Fatalf("status = %+v", st)
	}
	h.want("record:leaked permit:granted delete look")
	if api.ClaimHygieneID("u1") != "claim-hygiene/u1" {
		t.Fatalf("ID = %s", api.ClaimHygieneID("u1"))
	}
}

// Without a recheck interval the workflow looks again every minute, not in a busy loop.
func TestRecheckDefaultsToAMinute(t *testing.T) {
	h := newHygieneEnv(t)
	h.looks = []hygiene.ClaimCheck{{Finding: leakFinding(capacity.FindingStuck, false)}, {}}
	start := h.env.Now()
	h.env.ExecuteWorkflow(ClaimHygieneWorkflow, api.ClaimHygieneInput{Finding: leakFinding(capacity.FindingStuck, false)})
	if err := h.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if took := h.env.Now().Sub(start); took < 2*time.Minute {
		t.Fatalf("two looks took %s", took)
	}
}

func TestLeakedClaimIsRecordedThenDeletedOnce(t *testing.T) {
	h := newHygieneEnv(t)
	h.permits = []bool{true}
	h.deletes = []hygiene.ClaimCheck{{Deleted: true, Finding: leakFinding(capacity.FindingLeaked, true)}}
	st := h.run(leakFinding(capacity.FindingLeaked, true))
	if st.State != api.HygieneDeleted || st.Finding.Version != "41" || st.Finding.ShareIDs[0] != "s1" {
		t.Fatalf("status = %+v", st)
	}
	h.want("record:leaked permit:granted delete")
}

// The breaker refuses: the finding is held (visible with the breaker's reason) and asked again at
// the next look; the Event is not written twice.
func TestLeakedClaimHeldByTheBreakerWaits(t *testing.T) {
	h := newHygieneEnv(t)
	h.permits = []bool{false, true}
	h.looks = []hygiene.ClaimCheck{{Finding: leakFinding(capacity.FindingLeaked, true)}}
	h.deletes = []hygiene.ClaimCheck{{Deleted: true}}
	h.env.RegisterDelayedCallback(func() {
		if st := h.query(); st.State != api.HygieneHeld || !strings.Contains(st.Held, "paused") || st.Finding.ShareIDs[0] != "s1" {
			t.Errorf("while held: %+v", st)
		}
	}, 30*time.Second)
	if st := h.run(leakFinding(capacity.FindingLeaked, true)); st.State != api.HygieneDeleted || st.Held != "" || st.Checks != 1 {
		t.Fatalf("status = %+v", st)
	}
	h.want("record:leaked permit:denied look permit:granted delete")
}

// A claim on a lost node is recorded Unknown and never deleted; once the node is fenced the next
// look finds the leak, which is recorded and deleted.
func TestClaimOnALostNodeWaitsForTheFence(t *testing.T) {
	h := newHygieneEnv(t)
	h.permits = []bool{true}
	h.looks = []hygiene.ClaimCheck{{Finding: leakFinding(capacity.FindingNodeLost, false)}, {Finding: leakFinding(capacity.FindingNodeLost, false)},
		{Finding: leakFinding(capacity.FindingLeaked, true)}}
	h.deletes = []hygiene.ClaimCheck{{Deleted: true}}
	h.env.RegisterDelayedCallback(func() {
		if st := h.query(); st.State != capacity.FindingNodeLost || st.Checks != 1 {
			t.Errorf("before the fence: %+v", st)
		}
	}, 90*time.Second)
	if st := h.run(leakFinding(capacity.FindingNodeLost, false)); st.State != api.HygieneDeleted || st.Checks != 3 {
		t.Fatalf("status = %+v", st)
	}
	h.want("record:node-lost look look look record:leaked permit:granted delete")
}

// A stuck share stays visible (ShareID, version, reason) until its Pod starts.
func TestStuckShareStaysVisibleUntilItsPodStarts(t *testing.T) {
	h := newHygieneEnv(t)
	h.looks = []hygiene.ClaimCheck{{Finding: leakFinding(capacity.FindingStuck, false)}, {}}
	h.env.RegisterDelayedCallback(func() {
		st := h.query()
		if st.State != capacity.FindingStuck || st.Finding.Version != "41" || st.Finding.Reason != "stuck reason" || st.Finding.ShareIDs[0] != "s1" {
			t.Errorf("while stuck: %+v", st)
		}
	}, 90*time.Second)
	if st := h.run(leakFinding(capacity.FindingStuck, false)); st.State != api.HygieneResolved || st.Checks != 2 {
		t.Fatalf("status = %+v", st)
	}
	h.want("record:stuck look look")
}

// The fresh look before the deletion finds a consumer came back: nothing is deleted, and the
// workflow ends resolved without waiting; a claim deleted by someone else ends gone.
func TestFreshLookBeforeTheDeletionDecides(t *testing.T) {
	h := newHygieneEnv(t)
	h.permits = []bool{true}
	h.deletes = []hygiene.ClaimCheck{{Finding: capacity.Finding{Namespace: "t", Claim: "job-0-gpu", UID: "u1"}}}
	if st := h.run(leakFinding(capacity.FindingLeaked, true)); st.State != api.HygieneResolved || st.Checks != 0 {
		t.Fatalf("status = %+v", st)
	}
	h.want("record:leaked permit:granted delete")

	h = newHygieneEnv(t)
	h.permits = []bool{true}
	h.deletes = []hygiene.ClaimCheck{{Gone: true}}
	if st := h.run(leakFinding(capacity.FindingLeaked, true)); st.State != api.HygieneGone {
		t.Fatalf("status = %+v", st)
	}
	h = newHygieneEnv(t)
	h.looks = []hygiene.ClaimCheck{{Gone: true}}
	if st := h.run(leakFinding(capacity.FindingLeaked, false)); st.State != api.HygieneGone || st.Checks != 1 {
		t.Fatalf("report-only leak deleted by someone: %+v", st)
	}
	h.want("record:leaked look")
}

// A leak the policy only reports stands for days: each run keeps its history bounded and the next
// run does not write the Event again.
func TestStandingFindingContinuesAsNew(t *testing.T) {
	h := newHygieneEnv(t)
	h.looks = []hygiene.ClaimCheck{{Finding: leakFinding(capacity.FindingLeaked, false)}}
	h.env.ExecuteWorkflow(ClaimHygieneWorkflow, api.ClaimHygieneInput{Finding: leakFinding(capacity.FindingLeaked, false), Recheck: time.Minute})
	var next api.ClaimHygieneInput
	continuedAs(t, h.env, &next)
	if next.Recorded != capacity.FindingLeaked || next.Finding.Claim != "job-0-gpu" || next.Recheck != time.Minute {
		t.Fatalf("next run = %+v", next)
	}
	if n := strings.Count(strings.Join(h.calls, " "), "look"); n != rechecksPerRun {
		t.Fatalf("%d looks in one run, want %d", n, rechecksPerRun)
	}
	if n := strings.Count(strings.Join(h.calls, " "), "record"); n != 1 {
		t.Fatalf("%d records", n)
	}
}
