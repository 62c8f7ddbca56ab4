package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// notRunRules are a run's rules from the version that tells the tooling's failures apart.
var notRunRules = Rules{ReleasePath: true, Repair: true, LadderTrust: true, StepAlerts: true, NotRunRetries: true}

// notRan is a check or step whose tool never ran on the device.
func notRan(why string) StepResult { return StepResult{Reason: why, NotRun: true} }

// A reset whose image cannot be pulled is taken again later, each time later, and never moves the
// ladder: ten not-runs of a step with one attempt (which would have retired the device ten times
// over) leave it quarantined, at the same step, with no try recorded; the third alerts a person;
// a mended image's reset then runs as the ladder's first try.
func TestANotRunResetNeverMovesTheLadder(t *testing.T) {
	p := ladderPolicy()
	p.Repair.Steps[0].Attempts = 1
	st, _ := onLadder(t, p)
	st.Follow(notRunRules)
	acts := st.Observe(idle(2), t0)
	wantKinds(t, "idle", acts, ActRepair)
	now := t0
	alerts := 0
	for i := 1; i <= 10; i++ {
		acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: notRan("container reset not started: ImagePullBackOff")}, now)
		for _, a := range acts {
			if a.Kind == ActAlert {
				alerts++
				if i != policy.DefaultNotRunAlertAfter || !strings.Contains(a.Reason, "did not run, 3 in a row") {
					t.Fatalf("not-run %d alerted: %+v", i, a)
				}
			}
		}
		l := st.Quarantine.Ladder
		wait := notRunBackoff(i, 0)
		if st.State != Quarantined || l.Step != 0 || l.Attempt != 0 || len(l.Tries) != 0 || l.Running || !l.RetryAt.Equal(now.Add(wait)) {
			t.Fatalf("not-run %d: state %s ladder %+v", i, st.State, l)
		}
		if d := st.NextDeadline(); !d.Equal(now.Add(wait)) {
			t.Fatalf("not-run %d: deadline %s, want %s", i, d, now.Add(wait))
		}
		if v := viewOf(st); v.NotRun == nil || v.NotRun.Count != i || !strings.Contains(st.Next(), "repair taken again at") {
			t.Fatalf("not-run %d: view %+v next %q", i, v.NotRun, st.Next())
		}
		wantKinds(t, "before its time", st.Tick(now.Add(wait-time.Second)))
		now = now.Add(wait)
		acts = st.Tick(now)
		wantKinds(t, "taken again", acts, ActRepair)
	}
	if alerts != 1 {
		t.Fatalf("%d alerts, want 1", alerts)
	}
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(now)}, now)
	wantKinds(t, "the mended reset ran", acts, ActProbe)
	if l := st.Quarantine.Ladder; len(l.Tries) != 1 || l.Attempt != 1 || st.NotRun != nil {
		t.Fatalf("ladder %+v not-run %+v", l, st.NotRun)
	}
}

// A probe that did not run fails no review and is no failed probe: the review waits at its probe,
// which is taken again; the probe that then runs decides.
func TestANotRunProbeFailsNoReview(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	st.Follow(notRunRules)
	acts := st.Observe(idle(2), t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0)
	wantKinds(t, "reset done", acts, ActProbe)
	review := st.Review.ID()
	at := t0.Add(time.Minute)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: notRan("probe Pod did not start within 5m0s (phase Pending: 0/1 nodes are available)")}, at)
	wantKinds(t, "probe not run", acts)
	if st.State != Recovering || st.Review.ID() != review || st.Review.Stage != StageProbe || st.Review.Probe != nil || st.LastProbe != nil {
		t.Fatalf("state %s review %+v last probe %+v", st.State, st.Review, st.LastProbe)
	}
	if tries := st.Quarantine.Ladder.Tries; tries[0].Review != "" || st.Quarantine.Ladder.Due {
		t.Fatalf("the try after it moved: %+v", st.Quarantine.Ladder)
	}
	acts = st.Tick(at.Add(policy.DefaultNotRunRetry))
	wantKinds(t, "probe taken again", acts, ActProbe)
	if acts[0].Check == nil || acts[0].Check.Timeout != st.Policy.Probe.Timeout || acts[0].Check.Namespace != st.Policy.Probe.Namespace {
		t.Fatalf("the probe taken again runs %+v, not the policy's probe", acts[0].Check)
	}
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(at)}, at.Add(2*time.Minute))
	wantKinds(t, "probe passed", acts, ActRefreshRule)
	acts = st.Report(Result{Action: acts[0], Outcome: Done}, at.Add(2*time.Minute))
	wantKinds(t, "on probation", acts, ActCanary)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: notRan("canary Job made no Pod within 10m0s")}, at.Add(3*time.Minute))
	wantKinds(t, "canary not run", acts)
	if st.Review.Stage != StageCanary || st.NotRun == nil || st.NotRun.Kind != ActCanary || st.NotRun.Count != 1 {
		t.Fatalf("review %+v not-run %+v", st.Review, st.NotRun)
	}
	acts = st.Tick(at.Add(3*time.Minute + policy.DefaultNotRunRetry))
	wantKinds(t, "canary taken again", acts, ActCanary)
	if acts[0].Check == nil || acts[0].Check.Namespace != st.Policy.Canary.Namespace {
		t.Fatalf("the canary taken again runs %+v, not the policy's canary", acts[0].Check)
	}
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(at)}, at.Add(5*time.Minute))
	wantKinds(t, "canary passed, window 0", acts, ActRelease)
}

// A not-run probe whose review a person ended meanwhile is not taken again.
func TestANotRunProbeOfAnEndedReviewIsDropped(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	st.Follow(notRunRules)
	acts := st.Observe(idle(2), t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0)
	st.Report(Result{Action: acts[0], Outcome: Done, Check: notRan("ImagePullBackOff")}, t0)
	st.Command(Command{Kind: CmdForceQuarantine, Actor: "op", Reason: "hold it"}, t0.Add(time.Second))
	if acts := st.Tick(t0.Add(policy.DefaultNotRunRetry)); len(acts) > 0 && acts[0].Kind == ActProbe {
		t.Fatalf("the probe of an ended review ran again: %+v", acts)
	}
	if st.NotRun != nil || viewOf(st).NotRun != nil {
		t.Fatalf("not-run kept: %+v", st.NotRun)
	}
}

// Runs recorded before the rule decide as they did: a not-run probe fails its review.
func TestBeforeTheRuleANotRunProbeFailsTheReview(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	acts := st.Observe(idle(2), t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0)
	st.Report(Result{Action: acts[0], Outcome: Done, Check: notRan("ImagePullBackOff")}, t0)
	if st.State == Recovering || st.NotRun != nil || st.LastProbe == nil || st.LastProbe.Passed {
		t.Fatalf("state %s not-run %+v last probe %+v", st.State, st.NotRun, st.LastProbe)
	}
}

func TestNotRunBackoff(t *testing.T) {
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i, w := range want {
		if got := notRunBackoff(i+1, 0); got != w {
			t.Errorf("after %d: %s, want %s", i+1, got, w)
		}
	}
	if got := notRunBackoff(3, 5*time.Second); got != 20*time.Second {
		t.Errorf("the policy's 5s, third: %s, want 20s", got)
	}
}

// A device paused while its probe waits to be taken again keeps waiting, with no deadline to wake
// for; its resume takes the probe.
func TestANotRunProbeWaitsForAPausedDevice(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	st.Follow(notRunRules)
	acts := st.Observe(idle(2), t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0)
	st.Report(Result{Action: acts[0], Outcome: Done, Check: notRan("ImagePullBackOff")}, t0)
	st.Command(Command{Kind: CmdPause, Actor: "op"}, t0.Add(time.Second))
	if d := st.NextDeadline(); !d.IsZero() && !d.After(t0.Add(policy.DefaultNotRunRetry)) {
		t.Fatalf("a paused device wakes at %s for its probe", d)
	}
	wantKinds(t, "paused, past the retry", st.Tick(t0.Add(time.Hour)))
	acts = st.Command(Command{Kind: CmdResume, Actor: "op"}, t0.Add(time.Hour))
	wantKinds(t, "resumed", acts, ActProbe)
}
