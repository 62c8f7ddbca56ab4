package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

// proofRules are the rules of a run that takes proof from the source.
var proofRules = Rules{ReleasePath: true, Repair: true, StepAlerts: true, LadderTrust: true, StepReports: true,
	DetectorsNotHolders: true, Causes: true, SourceProof: true}

// standing is the watcher's word on the idle device: Healthy, with the detectors' faults that
// still stand.
func standing(version int, at time.Time, faults ...string) Observation {
	o := driverSays(device.Healthy, version, at)
	o.Source, o.Standing = "", faults
	return o
}

// A reset passed its checks and window, but DCGM still shows the driver's recovery action: the
// review waits for it to go, and releases the device once it has.
func TestTheReviewWaitsForItsSources(t *testing.T) {
	st := inWindowAfterAReset(t, proofRules)
	// Arriving, a standing fault fails nothing: it was delivered before, as a fault.
	wantKinds(t, "standing recovery action", st.Observe(standing(3, t0.Add(5*time.Minute), "dcgm: recovery-action:2"), t0.Add(5*time.Minute)))
	if st.State != Recovering || st.Review.Stage != StageStability {
		t.Fatalf("a standing fault ended the window: %s %+v", st.State, st.Review)
	}
	acts := st.Tick(t0.Add(14 * time.Minute))
	wantKinds(t, "window over, the source still says the fault", acts)
	if st.Review.Stage != StageSources || !st.Review.Until.Equal(t0.Add(19*time.Minute)) || !st.NextDeadline().Equal(st.Review.Until) {
		t.Fatalf("review %+v, next deadline %s", st.Review, st.NextDeadline())
	}
	if last := st.Transitions[len(st.Transitions)-1]; !strings.Contains(last.Reason, "dcgm: recovery-action:2") {
		t.Fatalf("the trail does not say what it waits for: %+v", last)
	}
	if !strings.Contains(st.Next(), "for its sources to say Healthy") || len(viewOf(st).Standing) != 1 {
		t.Fatalf("next: %s, view %+v", st.Next(), viewOf(st).Standing)
	}
	acts = st.Observe(standing(4, t0.Add(16*time.Minute)), t0.Add(16*time.Minute))
	wantKinds(t, "the recovery action went back to none", acts, ActRelease)
	if st.Review.Stage != StageRelease {
		t.Fatalf("review %+v", st.Review)
	}
}

// A source that still says the fault when the wait ends fails the review: the ladder takes its
// next try, and the try's record says why.
func TestASourceThatKeepsTheFaultIsTheNextTry(t *testing.T) {
	st := inWindowAfterAReset(t, proofRules)
	st.Observe(standing(3, t0.Add(5*time.Minute), "dcgm: health:pcie"), t0.Add(5*time.Minute))
	st.Tick(t0.Add(14 * time.Minute))
	acts := st.Tick(t0.Add(19 * time.Minute))
	if st.State != Quarantined || !st.Quarantine.Ladder.Running {
		t.Fatalf("after the wait: %s, ladder %+v, actions %v", st.State, st.Quarantine.Ladder, kinds(acts))
	}
	tries := st.Quarantine.Ladder.Tries
	if len(tries) != 2 || !strings.Contains(tries[0].Review, "its sources still report the fault") || !strings.Contains(tries[0].Review, "dcgm: health:pcie") {
		t.Fatalf("tries %+v", tries)
	}
	if !hasKind(acts, ActRepair) {
		t.Fatalf("no next try: %v", kinds(acts))
	}
}

// A report that said Unhealthy while the step ran does not fail the review when it arrives
// (StepReports), but the review does not release the device while it stands.
func TestAStandingUnhealthyHoldsTheRelease(t *testing.T) {
	st := inWindowAfterAReset(t, proofRules)
	early := driverSays(device.Unhealthy, 3, t0.Add(100*time.Second))
	early.Message = "XID 48"
	st.Observe(early, t0.Add(5*time.Minute))
	if st.State != Recovering {
		t.Fatalf("state %s", st.State)
	}
	wantKinds(t, "window over", st.Tick(t0.Add(14*time.Minute)))
	if last := st.Transitions[len(st.Transitions)-1]; st.Review.Stage != StageSources || !strings.HasSuffix(last.Reason, ": reported Unhealthy (XID 48)") {
		t.Fatalf("review %+v, trail %q", st.Review, last.Reason)
	}
	acts := st.Observe(driverSays(device.Healthy, 4, t0.Add(15*time.Minute)), t0.Add(15*time.Minute))
	wantKinds(t, "the driver says Healthy", acts, ActRelease)
}

// While the review waits, a new fault fails it at once; a policy that gives the sources no time
// fails it when the window ends; and runs before the rule release as they did.
func TestSourceProofEdges(t *testing.T) {
	st := inWindowAfterAReset(t, proofRules)
	st.Observe(standing(3, t0.Add(5*time.Minute), "dcgm: recovery-action:1"), t0.Add(5*time.Minute))
	st.Tick(t0.Add(14 * time.Minute))
	st.Observe(driverSays(device.Unhealthy, 4, t0.Add(15*time.Minute)), t0.Add(15*time.Minute))
	if st.State != Quarantined {
		t.Fatalf("a new fault while waiting: %s", st.State)
	}

	st = inWindowAfterAReset(t, proofRules)
	st.Policy.SourceWait = 0
	st.Observe(standing(3, t0.Add(5*time.Minute), "dcgm: recovery-action:1"), t0.Add(5*time.Minute))
	st.Tick(t0.Add(14 * time.Minute))
	if st.State != Quarantined || !strings.Contains(st.Quarantine.Ladder.Tries[0].Review, "waited 0s") {
		t.Fatalf("no wait: %s %+v", st.State, st.Quarantine.Ladder)
	}

	st = inWindowAfterAReset(t, proofRules)
	st.Observe(standing(3, t0.Add(5*time.Minute)), t0.Add(5*time.Minute))
	wantKinds(t, "nothing stands", st.Tick(t0.Add(14*time.Minute)), ActRelease)

	r := proofRules
	r.SourceProof = false
	st = inWindowAfterAReset(t, r)
	st.Observe(standing(3, t0.Add(5*time.Minute), "dcgm: recovery-action:1"), t0.Add(5*time.Minute))
	wantKinds(t, "before the rule", st.Tick(t0.Add(14*time.Minute)), ActRelease)
}

func hasKind(acts []Action, k ActionKind) bool {
	for _, a := range acts {
		if a.Kind == k {
			return true
		}
	}
	return false
}

// A source that speaks after the ask and before a person's approval holds the approved release
// until it says nothing against the device; then the release goes ahead without a second ask.
func TestAnApprovedReleaseWaitsForItsSources(t *testing.T) {
	r := proofRules
	p := ladderPolicy()
	p.StabilityWindow, p.ApprovalRequired = 0, true
	st, _ := onLadder(t, p)
	st.Follow(r)
	acts := st.Observe(standing(2, t0.Add(time.Minute)), t0.Add(time.Minute))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0.Add(2 * time.Minute))}, t0.Add(2*time.Minute))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(3*time.Minute))
	acts = st.Report(Result{Action: acts[0], Outcome: Done}, t0.Add(3*time.Minute))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(4*time.Minute))
	wantKinds(t, "asked", acts, ActRequestApproval)
	st.Observe(standing(3, t0.Add(5*time.Minute), "dcgm: recovery-action:2"), t0.Add(5*time.Minute))
	acts = st.Command(Command{Kind: CmdApprove, Actor: "alice"}, t0.Add(6*time.Minute))
	if len(acts) != 0 || st.Review.Stage != StageSources || st.Review.ApprovedBy != "alice" {
		t.Fatalf("approved while a source spoke: %v, review %+v", kinds(acts), st.Review)
	}
	acts = st.Observe(standing(4, t0.Add(7*time.Minute)), t0.Add(7*time.Minute))
	wantKinds(t, "the source went quiet", acts, ActRelease)
	if acts[0].Actor != "alice" {
		t.Fatalf("released by %q, want the approver", acts[0].Actor)
	}
}
