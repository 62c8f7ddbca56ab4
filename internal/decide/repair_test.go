package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// ladderPolicy resets twice before giving up.
func ladderPolicy() policy.Policy {
	p := policy.Default()
	p.StabilityWindow = 0
	p.Repair = policy.Repair{Steps: []policy.RepairStep{{Kind: policy.RepairReset, Attempts: 2,
		Check: policy.Check{Image: "reset", Command: []string{"reset"}, Timeout: policy.JSONDuration(time.Minute)}}}}
	return p
}

// onLadder is a device quarantined automatically by a run that repairs, held by one Pod.
func onLadder(t *testing.T, p policy.Policy) (*DeviceState, []Action) {
	t.Helper()
	st := NewState(dev, "node-1", p, false)
	st.Follow(Rules{ReleasePath: true, Repair: true})
	acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
	wantKinds(t, "report", acts, ActTaint, ActAlert)
	return st, st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
}

// idle is the watcher's word that no Pod holds the device any more.
func idle(version int) Observation {
	o := obs(device.Unhealthy, version, "")
	o.Reporters = nil
	return o
}

func TestLadderResetsOnlyOnceIdleThenReviews(t *testing.T) {
	st, acts := onLadder(t, ladderPolicy())
	wantKinds(t, "quarantined while a Pod holds it", acts)
	if !strings.Contains(st.Next(), "repair once no Pod holds the device") {
		t.Fatalf("next: %s", st.Next())
	}
	acts = st.Observe(idle(2), t0.Add(time.Minute))
	wantKinds(t, "idle", acts, ActRepair)
	if acts[0].Check.Image != "reset" || st.State != Quarantined || !st.Quarantine.Ladder.Running {
		t.Fatalf("repair %+v state %s", acts[0], st.State)
	}
	// The reset worked: the review proves it, and a pass releases the device.
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0.Add(2 * time.Minute))}, t0.Add(2*time.Minute))
	wantKinds(t, "reset done", acts, ActProbe)
	if st.State != Recovering || !strings.Contains(st.Review.Trigger, "repair: reset attempt 1 done") {
		t.Fatalf("state %s review %+v", st.State, st.Review)
	}
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(3*time.Minute))
	wantKinds(t, "probe passed", acts, ActRefreshRule)
	acts = st.Report(Result{Action: acts[0], Outcome: Done}, t0.Add(3*time.Minute))
	wantKinds(t, "on probation", acts, ActCanary)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(4*time.Minute))
	wantKinds(t, "canary passed, window 0", acts, ActRelease)
	if reviewOf(st).firstReviewPassed() || repairOf(st).repairedBy() != "reset" {
		t.Fatalf("a repaired device counted as falsely quarantined (%t) or not as repaired (%q)", reviewOf(st).firstReviewPassed(), repairOf(st).repairedBy())
	}
	st.Report(Result{Action: acts[0], Outcome: Done}, t0.Add(4*time.Minute))
	if st.State != Released || len(st.Closed) != 1 || st.Closed[0].Ladder.Tries[0].Review != "passed: released" {
		t.Fatalf("state %s closed %+v", st.State, st.Closed)
	}
}

// Every failed try climbs: the next attempt, then the next step; after the last the device is
// Retired, stays fenced, is never reviewed again, and its release waits for a person.
func TestLadderRetiresAfterTheLastTry(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	acts := st.Observe(idle(2), t0)
	wantKinds(t, "idle", acts, ActRepair)
	// Try 1: the reset Pod fails outright.
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "exit code 1"}}, t0.Add(time.Minute))
	wantKinds(t, "try 1 failed", acts, ActRepair)
	if l := st.Quarantine.Ladder; l.Step != 0 || l.Attempt != 2 {
		t.Fatalf("ladder %+v", l)
	}
	// Try 2: the reset exits 0 but the probe after it fails.
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(2*time.Minute))
	wantKinds(t, "try 2 done", acts, ActProbe)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "XID 79"}}, t0.Add(3*time.Minute))
	wantKinds(t, "probe failed after the last try", acts, ActRefreshRule, ActAlert, ActRetire, ActAlert)
	if st.State != Retired || acts[3].Level != LevelCritical || !fenceOf(st).fenced() {
		t.Fatalf("state %s alert %+v", st.State, acts[3])
	}
	tries := st.Quarantine.Ladder.Tries
	if len(tries) != 2 || tries[0].Review != "not run: the step failed" || tries[1].Review != "probe failed: XID 79" {
		t.Fatalf("tries %+v", tries)
	}
	ev := repairOf(st).evidence()
	if !strings.Contains(ev["try-02"], "review: probe failed: XID 79") || !strings.Contains(ev["try-01"], "reset attempt 1: passed=false exit code 1") || !strings.Contains(ev["quarantined"], "device reported Unhealthy") ||
		!strings.Contains(ev["last-probe"], "passed=false XID 79") || !strings.Contains(ev["transition-001"], "Healthy -> Quarantined") {
		t.Fatalf("evidence %v", ev)
	}
	// Never reviewed again, whatever the clock or the reports say.
	if d := st.NextDeadline(); !d.IsZero() {
		t.Fatalf("a retired device has a deadline: %s", d)
	}
	wantKinds(t, "a year later", st.Tick(t0.Add(365*24*time.Hour)))
	wantKinds(t, "reported Unhealthy again", st.Observe(obs(device.Unhealthy, 3, ""), t0.Add(time.Hour)), ActInspectRule)
	wantKinds(t, "driver says Healthy", st.Observe(obs(device.Healthy, 4, SourceSlice), t0.Add(time.Hour)), ActInspectRule)
	if st.State != Retired {
		t.Fatalf("state %s", st.State)
	}
	if err := st.Validate(Command{Kind: CmdForceQuarantine, Actor: "op"}); err == nil {
		t.Fatal("a retired device was quarantined again")
	}
	// A person's release runs the review, and even a passing one ends with an approval.
	if err := st.Validate(Command{Kind: CmdRelease, Actor: "op"}); err != nil {
		t.Fatalf("a person may release a retired device: %v", err)
	}
	acts = st.Command(Command{Kind: CmdRelease, Actor: "op"}, t0.Add(2*time.Hour))
	wantKinds(t, "release", acts, ActProbe)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(2*time.Hour))
	acts = st.Report(Result{Action: acts[0], Outcome: Done}, t0.Add(2*time.Hour))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(2*time.Hour))
	wantKinds(t, "canary passed", acts, ActRequestApproval)
	if st.Policy.ApprovalRequired {
		t.Fatal("the policy asked for approval; the test must show the retirement does")
	}
}

// A device quarantined retireAfter times within 30 days is retired at once: a lemon is not
// repaired again.
func TestLadderRetiresALemon(t *testing.T) {
	p := ladderPolicy()
	p.Repair.RetireAfter = 3
	st := NewState(dev, "node-1", p, false)
	st.Follow(Rules{ReleasePath: true, Repair: true})
	st.Closed = []QuarantineRecord{{CreatedAt: t0.Add(-40 * 24 * time.Hour)}, {CreatedAt: t0.Add(-20 * 24 * time.Hour)}, {CreatedAt: t0.Add(-time.Hour)}}
	acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
	wantKinds(t, "third quarantine in 30 days", acts, ActRetire, ActAlert)
	if st.State != Retired || !strings.Contains(acts[0].Reason, "quarantined 3 times") {
		t.Fatalf("state %s reason %q", st.State, acts[0].Reason)
	}
}

// Without a ladder, or in a run recorded before it, a quarantine waits for its review as before.
func TestNoLadderNoRepair(t *testing.T) {
	for _, tt := range []struct {
		name  string
		p     policy.Policy
		rules Rules
	}{
		{"no ladder in the policy", policy.Default(), Rules{ReleasePath: true, Repair: true}},
		{"a run from before the ladder", ladderPolicy(), Rules{ReleasePath: true}},
	} {
		st := NewState(dev, "node-1", tt.p, false)
		st.Follow(tt.rules)
		acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
		wantKinds(t, tt.name, st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0))
		wantKinds(t, tt.name+": idle", st.Observe(idle(2), t0))
		if st.Quarantine.Ladder != nil || !st.NextDeadline().Equal(t0.Add(24*time.Hour)) {
			t.Fatalf("%s: ladder %+v deadline %s", tt.name, st.Quarantine.Ladder, st.NextDeadline())
		}
	}
}

// An operator's quarantine is theirs: it is not repaired.
func TestForcedQuarantineIsNotRepaired(t *testing.T) {
	st := NewState(dev, "node-1", ladderPolicy(), false)
	st.Follow(Rules{ReleasePath: true, Repair: true})
	acts := st.Command(Command{Kind: CmdForceQuarantine, Actor: "op"}, t0)
	wantKinds(t, "forced", st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0))
	if st.Quarantine.Ladder != nil {
		t.Fatalf("ladder %+v", st.Quarantine.Ladder)
	}
}

// A review after a try that ends without finding the device broken (no approval in time) stops the
// ladder: nothing says another reset would help, and a device that passed its checks is not retired
// for want of a person. The quarantine waits for its lease review, as without a ladder.
func TestLadderStopsWhenAReviewEndsWithoutAFault(t *testing.T) {
	p := ladderPolicy()
	p.ApprovalRequired = true
	p.ApprovalTimeout = policy.JSONDuration(time.Hour)
	st, _ := onLadder(t, p)
	acts := st.Observe(idle(2), t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done}, t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0)
	wantKinds(t, "canary passed", acts, ActRequestApproval)
	acts = st.Tick(t0.Add(time.Hour))
	wantKinds(t, "no approval", acts, ActRefreshRule, ActAlert)
	wantKinds(t, "idle again", st.Observe(idle(3), t0.Add(2*time.Hour)))
	if st.State != Quarantined || st.Quarantine.Ladder.Tries[0].Review != "no approval within 1h0m0s" {
		t.Fatalf("state %s tries %+v", st.State, st.Quarantine.Ladder.Tries)
	}
	if d := st.NextDeadline(); d.IsZero() {
		t.Fatal("no lease review after the ladder stopped")
	}
}

// A try that finds the device still allocated runs nothing and counts for nothing: it is taken
// again once the device is reported idle, or after RepairRetry.
func TestLadderWaitsForABusyDevice(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	acts := st.Observe(idle(2), t0)
	wantKinds(t, "idle", acts, ActRepair)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Busy: true, Reason: "claim ns/c holds it"}}, t0)
	wantKinds(t, "busy", acts)
	if l := st.Quarantine.Ladder; len(l.Tries) != 0 || l.Attempt != 0 || !st.NextDeadline().Equal(t0.Add(RepairRetry)) {
		t.Fatalf("ladder %+v deadline %s", l, st.NextDeadline())
	}
	acts = st.Tick(t0.Add(RepairRetry))
	wantKinds(t, "retry", acts, ActRepair)
	if l := st.Quarantine.Ladder; len(l.Tries) != 1 || l.Attempt != 1 || !l.RetryAt.IsZero() {
		t.Fatalf("ladder %+v", l)
	}
	// Still held a minute later: looked at again, said once in the trail.
	n := len(st.Transitions)
	st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Busy: true, Reason: "claim ns/c holds it"}}, t0.Add(RepairRetry))
	if len(st.Transitions) != n || st.Transitions[n-1].Reason != "repair waits: claim ns/c holds it" {
		t.Fatalf("transitions %+v", st.Transitions[n-1:])
	}
}

// A retired device's rule removed by hand is put back: it is known broken, and only a release
// with an approval brings it back.
func TestRetiredDeviceIsFencedAgain(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	repairOf(st).retire("test", t0)
	acts := st.Report(Result{Action: Action{Kind: ActInspectRule}, Outcome: Done, Info: RuleInfo{Name: "r", Actor: "kubectl"}}, t0.Add(time.Hour))
	wantKinds(t, "rule gone", acts, ActFenceMembers, ActAlert)
	if st.State != Retired || acts[1].Level != LevelCritical || !strings.Contains(acts[0].Reason, "by kubectl") {
		t.Fatalf("state %s actions %+v", st.State, acts)
	}
}

// A busy try on a later step is taken again as that step's, not the one before; a failed review
// of a quarantine that took no try yet records nothing and does not climb.
func TestLadderKeepsItsPlaceAcrossSteps(t *testing.T) {
	p := ladderPolicy()
	p.Repair.Steps = append(p.Repair.Steps, p.Repair.Steps[0])
	p.Repair.Steps[0].Attempts = 1
	st, _ := onLadder(t, p)
	acts := st.Observe(idle(2), t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "exit 1"}}, t0)
	wantKinds(t, "first step failed", acts, ActRepair)
	if l := st.Quarantine.Ladder; l.Step != 1 || l.Attempt != 1 {
		t.Fatalf("ladder %+v", l)
	}
	st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Busy: true, Reason: "held"}}, t0)
	if l := st.Quarantine.Ladder; l.Step != 0 || l.Attempt != 1 || len(l.Tries) != 1 {
		t.Fatalf("after a busy try: %+v", l)
	}
	acts = st.Tick(t0.Add(RepairRetry))
	wantKinds(t, "retried", acts, ActRepair)
	if l := st.Quarantine.Ladder; l.Step != 1 || l.Attempt != 1 || len(l.Tries) != 2 {
		t.Fatalf("the retry is not the second step's first try: %+v", l)
	}

	fresh, _ := onLadder(t, ladderPolicy())
	acts = fresh.Command(Command{Kind: CmdRelease, Actor: "op"}, t0)
	wantKinds(t, "release before any try", acts, ActProbe)
	fresh.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "XID 79"}}, t0)
	if l := fresh.Quarantine.Ladder; len(l.Tries) != 0 || fresh.State != Quarantined {
		t.Fatalf("ladder %+v state %s", l, fresh.State)
	}
}

// An operator's force-quarantine decided before the ladder retired the device, and carried out
// after, leaves it retired: no new quarantine, no review, no release without a person.
func TestForcedTaintAfterRetirementKeepsItRetired(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	st.State = Healthy // as the operator's command found it
	forced := st.Command(Command{Kind: CmdForceQuarantine, Actor: "ops"}, t0)
	st.State = Quarantined
	repairOf(st).retire("every step of the repair ladder failed", t0.Add(time.Minute))
	if len(forced) != 1 || forced[0].Kind != ActTaint {
		t.Fatalf("forced %+v", forced)
	}
	acts := st.Report(Result{Action: forced[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0.Add(2*time.Minute))
	last := st.Transitions[len(st.Transitions)-1]
	if len(acts) != 0 || st.State != Retired || !st.NextDeadline().IsZero() || !strings.Contains(last.Reason, "came after the retirement") {
		t.Fatalf("acts %v state %s deadline %s last %+v", kinds(acts), st.State, st.NextDeadline(), last)
	}
}

// bootSeen is the boot ID the latest try that recorded one saw; none without a ladder or a record.
func TestBootSeenIsTheLatestTrysRecord(t *testing.T) {
	st := &DeviceState{}
	if repairOf(st).bootSeen() != "" {
		t.Fatal("no quarantine")
	}
	st.Quarantine = &QuarantineRecord{Ladder: &Ladder{Tries: []RepairTry{
		{Result: &StepResult{BootID: "boot-1"}}, {Result: &StepResult{BootID: "boot-2"}}, {Result: &StepResult{}}, {}}}}
	if got := repairOf(st).bootSeen(); got != "boot-2" {
		t.Fatalf("BootSeen = %q", got)
	}
	st.Quarantine.Ladder.Tries = st.Quarantine.Ladder.Tries[:1]
	if got := repairOf(st).bootSeen(); got != "boot-1" {
		t.Fatalf("BootSeen of the first try only = %q", got)
	}
	st.Quarantine.Ladder.Tries = []RepairTry{{Result: &StepResult{}}, {}}
	if got := repairOf(st).bootSeen(); got != "" {
		t.Fatalf("BootSeen without a record = %q", got)
	}
}

// Under StepAlerts a failed try warns what it found and what comes next: the step's failure, or a
// review that found the device still broken after the step ran; the last try's failure retires
// the device, whose own critical alert says so, and nothing more. Without the rule (runs recorded
// before it) a failed try sends nothing.
func TestFailedTriesWarnWhatComesNext(t *testing.T) {
	for _, alerts := range []bool{true, false} {
		st := NewState(dev, "node-1", ladderPolicy(), false)
		st.Follow(Rules{ReleasePath: true, Repair: true, StepAlerts: alerts})
		acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
		st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
		acts = st.Observe(idle(2), t0)
		// Try 1: the reset fails outright.
		acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "exit code 1"}}, t0.Add(time.Minute))
		if !alerts {
			wantKinds(t, "try 1 failed, no rule", acts, ActRepair)
			continue
		}
		wantKinds(t, "try 1 failed", acts, ActAlert, ActRepair)
		if acts[0].Level != LevelWarning || acts[0].Reason != "repair reset attempt 1 failed: exit code 1; next: reset" {
			t.Fatalf("alert %+v", acts[0])
		}
		// Try 2: the reset runs, but the probe after it fails: the last try, so the device retires.
		acts = st.Report(Result{Action: acts[1], Outcome: Done, Check: pass(t0.Add(2 * time.Minute))}, t0.Add(2*time.Minute))
		wantKinds(t, "try 2 ran", acts, ActProbe)
		acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "probe exit 1", At: t0.Add(3 * time.Minute)}}, t0.Add(3*time.Minute))
		if st.State != Retired {
			t.Fatalf("state %s", st.State)
		}
		for _, a := range acts {
			if a.Kind == ActAlert && a.Level == LevelWarning && strings.HasPrefix(a.Reason, "repair ") {
				t.Fatalf("a retired device's last try warned too: %+v", acts)
			}
		}
	}
}

// A review that finds the device still broken after a step that ran warns so, naming the next try.
func TestStillBrokenAfterAStepWarns(t *testing.T) {
	p := ladderPolicy()
	p.Repair.Steps[0].Attempts = 1
	p.Repair.Steps = append(p.Repair.Steps, policy.RepairStep{Kind: policy.RepairNode, Attempts: 1, Approval: true, Holders: policy.HoldersWait,
		Check: policy.Check{Timeout: policy.JSONDuration(time.Minute)}, Template: `{"apiVersion": "v1", "kind": "K"}`})
	st := NewState(dev, "node-1", p, false)
	st.Follow(Rules{ReleasePath: true, Repair: true, StepAlerts: true})
	acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
	st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
	acts = st.Observe(idle(2), t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0.Add(time.Minute))}, t0.Add(time.Minute))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "probe exit 1", At: t0.Add(2 * time.Minute)}}, t0.Add(2*time.Minute))
	var warned string
	for _, a := range acts {
		if a.Kind == ActAlert && strings.HasPrefix(a.Reason, "repair reset") {
			warned = a.Reason
		}
	}
	if warned != "repair reset attempt 1 ran, but the device is still broken; the next step waits for a person's approval" {
		t.Fatalf("alerts %+v", acts)
	}
}

// A node step busy moving the node's holders looks again within MoveRetry; one busy for any other
// reason within RepairRetry.
func TestANodeStepMovingHoldersLooksAgainSooner(t *testing.T) {
	for _, holders := range [][]string{nil, {"team/train-0"}} {
		st, _ := onLadder(t, ladderPolicy())
		acts := st.Observe(idle(2), t0)
		st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Busy: true, Reason: "busy", Holders: holders}}, t0)
		want := t0.Add(RepairRetry)
		if holders != nil {
			want = t0.Add(MoveRetry)
		}
		if got := st.Quarantine.Ladder.RetryAt; !got.Equal(want) {
			t.Fatalf("holders %v: looks again at %s, want %s", holders, got, want)
		}
	}
}
