package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
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

// The driver's recovery action of node reboot outlives a reset: the review fails, and the ladder
// takes its node step next, not the reset's second attempt, which the driver said cannot help. A
// source that asks for nothing more takes the reset's next attempt as before, and so do runs
// before the rule.
func TestANodeVerdictThatOutlivesAResetBringsTheNodeStep(t *testing.T) {
	node := policy.RepairStep{Kind: policy.RepairNode, Attempts: 1, Check: policy.Check{Image: "reboot", Timeout: policy.JSONDuration(time.Minute)}}
	run := func(r Rules, word string) (*DeviceState, []Action) {
		st := inWindowAfterAReset(t, r)
		st.Policy.Repair.Steps = append(st.Policy.Repair.Steps, node)
		st.Observe(standing(3, t0.Add(5*time.Minute), word), t0.Add(5*time.Minute))
		st.Tick(t0.Add(14 * time.Minute))
		return st, st.Tick(t0.Add(19 * time.Minute))
	}
	r := proofRules
	r.SourceVerdict = true
	st, acts := run(r, "dcgm: recovery-action:2")
	tries := st.Quarantine.Ladder.Tries
	if !hasKind(acts, ActRepair) || len(tries) != 2 || tries[1].Kind != policy.RepairNode || st.Quarantine.Ladder.Step != 1 {
		t.Fatalf("after a node verdict: actions %v, tries %+v", kinds(acts), tries)
	}
	st, _ = run(r, "dcgm: health:pcie")
	if tries := st.Quarantine.Ladder.Tries; len(tries) != 2 || tries[1].Kind != policy.RepairReset || tries[1].Attempt != 2 {
		t.Fatalf("a source that asks for no node step: tries %+v", tries)
	}
	st, _ = run(proofRules, "dcgm: recovery-action:2")
	if tries := st.Quarantine.Ladder.Tries; len(tries) != 2 || tries[1].Kind != policy.RepairReset {
		t.Fatalf("before the rule: tries %+v", tries)
	}
}

// A ladder that goes to its node step before its first step was tried passes that step over, and
// a retirement after it names the step its sources skipped; a step tried once is no step passed
// over.
func TestALadderPassedOverAStepForItsSourcesSaysSo(t *testing.T) {
	steps := []policy.RepairStep{{Kind: policy.RepairReset, Attempts: 2}, {Kind: policy.RepairNode, Attempts: 1}}
	run := func(attempt int) *Ladder {
		st, _ := onLadder(t, ladderPolicy())
		st.Follow(Rules{Repair: true, SourceVerdict: true})
		st.Policy.Repair.Steps = steps
		st.Quarantine.Ladder.Attempt = attempt
		repairOf(st).toNodeStep(policy.FirstNode, t0)
		return st.Quarantine.Ladder
	}
	l := run(0)
	if l.Step != 1 || l.Attempt != 0 || len(l.SourcesSkipped) != 1 || l.SourcesSkipped[0] != policy.RepairReset {
		t.Fatalf("untried reset: step %d attempt %d, passed over %v", l.Step, l.Attempt, l.SourcesSkipped)
	}
	if got := l.skipped(steps); got != "; its sources skipped reset" {
		t.Fatalf("retirement names %q", got)
	}
	if l = run(1); l.Step != 1 || len(l.SourcesSkipped) != 0 || l.skipped(steps) != "" {
		t.Fatalf("a tried reset: step %d, passed over %v", l.Step, l.SourcesSkipped)
	}
}

// A new leader re-sends the device's state before its Prometheus answered: nothing it knows
// stands, and it says so (StandingUnread). The review keeps waiting on the recovery action that
// stands, and releases once a watcher that read its sources says it went; before the rule the
// unread word cleared the sources and released the device at once.
func TestANewLeaderThatHasNotReadItsSourcesReleasesNothing(t *testing.T) {
	run := func(r Rules) (*DeviceState, []Action) {
		st := inWindowAfterAReset(t, r)
		st.Observe(standing(3, t0.Add(5*time.Minute), "dcgm: recovery-action:2"), t0.Add(5*time.Minute))
		st.Tick(t0.Add(14 * time.Minute))
		unread := standing(4, t0.Add(15*time.Minute))
		unread.StandingUnread = true
		return st, st.Observe(unread, t0.Add(15*time.Minute))
	}
	r := proofRules
	r.KeepsStanding = true
	st, acts := run(r)
	if hasKind(acts, ActRelease) || st.Review.Stage != StageSources || len(st.Standing) != 1 {
		t.Fatalf("an unread source released: actions %v, review %+v, standing %v", kinds(acts), st.Review, st.Standing)
	}
	acts = st.Observe(standing(5, t0.Add(16*time.Minute)), t0.Add(16*time.Minute))
	wantKinds(t, "the read sources say it went", acts, ActRelease)
	if _, acts = run(proofRules); !hasKind(acts, ActRelease) {
		t.Fatalf("before the rule: actions %v", kinds(acts))
	}
}
