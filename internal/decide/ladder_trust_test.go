package decide

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// trusted are the rules of a run that takes the ladder's rare-path fixes (LadderTrust).
var trusted = Rules{ReleasePath: true, Repair: true, StepAlerts: true, LadderTrust: true}

// trustedAtFirstStep quarantines a device under p and LadderTrust, held by a Pod that then leaves:
// the ladder's first step is asked for.
func trustedAtFirstStep(t *testing.T, p policy.Policy) (*DeviceState, []Action) {
	t.Helper()
	st := NewState(dev, "node-1", p, false)
	st.Follow(trusted)
	acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
	st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
	acts = st.Observe(idle(2), t0)
	wantKinds(t, "idle", acts, ActRepair)
	return st, acts
}

// toTrustedApproval climbs an approvedReboot ladder, under LadderTrust, until the node step waits.
func toTrustedApproval(t *testing.T) *DeviceState {
	t.Helper()
	st, acts := trustedAtFirstStep(t, approvedReboot())
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "reset exit 1"}}, t0.Add(time.Minute))
	wantKinds(t, "reset failed", acts, ActAlert, ActRequestApproval)
	return st
}

// A step's approval names its quarantine: a button left from an earlier quarantine of the
// device, for the same step and try, approves nothing in a later one.
func TestStepApprovalNamesItsQuarantine(t *testing.T) {
	st := toTrustedApproval(t)
	first, step := st.StepApproval()
	if step != "node" || !strings.HasPrefix(first, "repair-2-node-") || !strings.Contains(first, t0.Format(time.RFC3339Nano)) {
		t.Fatalf("approval ID %q for %q", first, step)
	}
	// The state query's copy carries no rules: it names the same ask (callers approve with it).
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var queried DeviceState
	if err := json.Unmarshal(raw, &queried); err != nil {
		t.Fatal(err)
	}
	if id, _ := queried.StepApproval(); id != first {
		t.Fatalf("the queried state names %q, the workflow %q", id, first)
	}
	// The quarantine ends (a person releases it), and the device fails again an hour later.
	later := NewState(dev, "node-1", approvedReboot(), false)
	later.Follow(trusted)
	at := t0.Add(time.Hour)
	acts := later.Observe(obs(device.Unhealthy, 1, ""), at)
	later.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, at)
	acts = later.Observe(idle(2), at)
	later.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "reset exit 1"}}, at)
	second, _ := later.StepApproval()
	if second == first {
		t.Fatalf("two quarantines ask with one ID %q", first)
	}
	if err := later.Validate(Command{Kind: CmdApprove, Actor: "ana", Review: first}); err == nil {
		t.Fatal("the earlier quarantine's button was accepted")
	}
	if acts := later.Command(Command{Kind: CmdApprove, Actor: "ana", Review: first}, at); len(acts) != 0 || !later.Quarantine.Ladder.Awaiting {
		t.Fatalf("the earlier quarantine's button ran the step: %+v", acts)
	}
	wantKinds(t, "its own button", later.Command(Command{Kind: CmdApprove, Actor: "ana", Review: second}, at), ActRepair)
}

// An approval is checked where it is applied: a release approval accepted while the review
// waited, applied after a report failed that review and the ladder asked about a reboot,
// approves nothing.
func TestReleaseApprovalDoesNotApproveAReboot(t *testing.T) {
	p := approvedReboot()
	p.ApprovalRequired = true
	st, acts := trustedAtFirstStep(t, p)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(time.Minute))
	wantKinds(t, "reset passed", acts, ActProbe)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(time.Minute))
	acts = st.Report(Result{Action: acts[0], Outcome: Done}, t0.Add(time.Minute))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(time.Minute))
	wantKinds(t, "waits for the release approval", acts, ActRequestApproval)
	release := st.Ask()
	if release != st.Review.ID() {
		t.Fatalf("ask %q, review %q", release, st.Review.ID())
	}
	// The approval is accepted for the release; before the loop applies it, a report fails the
	// review and the ladder asks about the node step.
	if err := st.Validate(Command{Kind: CmdApprove, Actor: "ana", Review: release}); err != nil {
		t.Fatal(err)
	}
	failed := obs(device.Unhealthy, 3, SourceSlice)
	failed.Reporters = nil
	st.Observe(failed, t0.Add(2*time.Minute))
	if id, step := st.StepApproval(); step != "node" {
		t.Fatalf("the ladder does not ask about the reboot: %q %q, state %s", id, step, st.State)
	}
	for _, k := range []CommandKind{CmdReject, CmdReleaseApproval, CmdApprove} {
		if acts := st.Command(Command{Kind: k, Actor: "ana", Review: release}, t0.Add(2*time.Minute)); len(acts) != 0 || !st.Quarantine.Ladder.Awaiting {
			t.Fatalf("the release's %s decided the reboot: %+v", k, acts)
		}
	}
	if l := st.Quarantine.Ladder; !l.Awaiting || l.ApprovedBy != "" {
		t.Fatalf("ladder %+v", l)
	}
	if last := st.Transitions[len(st.Transitions)-1]; !strings.Contains(last.Reason, "not applied: it answered "+release) {
		t.Fatalf("last transition %+v", last)
	}
}

// A step that never ran is not a failed step: after its approval was refused, timed out, or was
// overtaken by a person's release review that failed, the next failed review asks for the same
// step again instead of climbing past it and retiring the device.
func TestAStepThatNeverRanIsAskedAgain(t *testing.T) {
	for _, tt := range []struct {
		name string
		stop func(st *DeviceState) []Action
	}{
		{"rejected", func(st *DeviceState) []Action {
			st.Command(Command{Kind: CmdReject, Actor: "bo"}, t0.Add(2*time.Minute))
			// The quarantine's own review comes, and its probe fails.
			acts := st.Tick(st.Quarantine.ExpiresAt)
			wantKinds(t, "review", acts, ActProbe)
			return st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "XID 79"}}, st.Quarantine.ExpiresAt)
		}},
		{"no answer", func(st *DeviceState) []Action {
			st.Tick(t0.Add(2 * time.Hour))
			acts := st.Tick(st.Quarantine.ExpiresAt)
			wantKinds(t, "review", acts, ActProbe)
			return st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "XID 79"}}, st.Quarantine.ExpiresAt)
		}},
		{"release review while it waits", func(st *DeviceState) []Action {
			acts := st.Command(Command{Kind: CmdRelease, Actor: "bo"}, t0.Add(2*time.Minute))
			wantKinds(t, "release", acts, ActProbe)
			return st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "XID 79"}}, t0.Add(3*time.Minute))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := toTrustedApproval(t)
			acts := tt.stop(st)
			if st.State == Retired {
				t.Fatalf("retired although the node step never ran: %s", st.Transitions[len(st.Transitions)-1].Reason)
			}
			if id, step := st.StepApproval(); step != "node" || !strings.HasPrefix(id, "repair-2-node-") {
				t.Fatalf("the node step is not asked for again: %q %q (actions %+v)", id, step, acts)
			}
			if acts[len(acts)-1].Kind != ActRequestApproval {
				t.Fatalf("actions %+v", acts)
			}
			wantKinds(t, "approved", st.Command(Command{Kind: CmdApprove, Actor: "ana"}, st.Transitions[len(st.Transitions)-1].At), ActRepair)
			if l := st.Quarantine.Ladder; l.Step != 1 || l.Attempt != 1 || len(l.Tries) != 2 {
				t.Fatalf("ladder %+v", l)
			}
		})
	}
}

// A retired device whose rule goes missing during a person's release review is not released:
// the review stops, the device stays Retired and its rule is put back.
func TestRetiredRuleMissingDuringReviewIsFencedAgain(t *testing.T) {
	st, acts := trustedAtFirstStep(t, ladderPolicy())
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "exit 1"}}, t0)
	st.Report(Result{Action: acts[1], Outcome: Done, Check: StepResult{Reason: "exit 1"}}, t0)
	if st.State != Retired {
		t.Fatalf("state %s", st.State)
	}
	acts = st.Command(Command{Kind: CmdRelease, Actor: "op"}, t0.Add(time.Hour))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(time.Hour))
	wantKinds(t, "probe passed", acts, ActRefreshRule)
	// The probation taint finds the rule gone.
	acts = st.Report(Result{Action: acts[0], Outcome: Missing}, t0.Add(time.Hour))
	wantKinds(t, "rule missing", acts, ActFenceMembers, ActAlert)
	if st.State != Retired || st.Review != nil || st.Quarantine == nil || acts[0].Key != TaintQuarantine {
		t.Fatalf("state %s review %+v fence %+v", st.State, st.Review, acts[0])
	}
	if !strings.Contains(acts[1].Reason, "went missing during its release review") || acts[1].Level != LevelCritical {
		t.Fatalf("alert %+v", acts[1])
	}
}

// retireAfter counts quarantines for a fault: two released restrictions and the first fault do not
// make a lemon; three faults do.
func TestRetireAfterCountsFaultsOnly(t *testing.T) {
	for _, tt := range []struct {
		name    string
		earlier State
		retired bool
	}{
		{"restrictions", Restricted, false},
		{"faults", Quarantined, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := ladderPolicy()
			p.Repair.RetireAfter = 3
			st := NewState(dev, "node-1", p, false)
			st.Follow(trusted)
			for i := range 2 {
				at := t0.Add(time.Duration(i-3) * time.Hour)
				st.Closed = append(st.Closed, QuarantineRecord{State: tt.earlier, Effect: policy.EffectNoSchedule, CreatedAt: at, ClosedAt: at.Add(time.Minute)})
			}
			acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
			st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
			if got := st.State == Retired; got != tt.retired {
				t.Fatalf("retired %t, want %t (%s)", got, tt.retired, st.Transitions[len(st.Transitions)-1].Reason)
			}
			if st.Quarantine.State != Quarantined {
				t.Fatalf("the record keeps %q", st.Quarantine.State)
			}
		})
	}
}

// A restriction's record leaves first when the records are full, so retireAfter keeps its faults.
func TestClosedRecordsKeepFaultsFirst(t *testing.T) {
	st := NewState(dev, "node-1", ladderPolicy(), false)
	st.Follow(trusted)
	for i := range maxClosed {
		s := Quarantined
		if i == 3 {
			s = Restricted
		}
		st.Closed = append(st.Closed, QuarantineRecord{State: s, CreatedAt: t0.Add(time.Duration(i) * time.Minute)})
	}
	st.Quarantine = &QuarantineRecord{State: Quarantined, CreatedAt: t0.Add(time.Hour)}
	fenceOf(st).closeRecord("op", "released", t0.Add(2*time.Hour))
	if len(st.Closed) != maxClosed {
		t.Fatalf("%d records", len(st.Closed))
	}
	for _, q := range st.Closed {
		if q.State != Quarantined {
			t.Fatalf("a restriction outlived a fault: %+v", st.Closed)
		}
	}
	if !st.Closed[0].CreatedAt.Equal(t0) || !st.Closed[maxClosed-1].CreatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("order lost: first %s last %s", st.Closed[0].CreatedAt, st.Closed[maxClosed-1].CreatedAt)
	}
	// With no restriction left, the oldest goes.
	st.Quarantine = &QuarantineRecord{State: Quarantined, CreatedAt: t0.Add(3 * time.Hour)}
	fenceOf(st).closeRecord("op", "released", t0.Add(4*time.Hour))
	if len(st.Closed) != maxClosed || !st.Closed[0].CreatedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("first %s of %d", st.Closed[0].CreatedAt, len(st.Closed))
	}
}

// A retired device a person releases was brought back by no step: it does not count toward the
// time to repair, nor as a falsely quarantined device.
func TestRetiredAndReleasedIsNotRepaired(t *testing.T) {
	st, acts := trustedAtFirstStep(t, ladderPolicy())
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "XID 79"}}, t0)
	acts = st.Report(Result{Action: acts[len(acts)-1], Outcome: Done, Check: pass(t0)}, t0)
	st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "XID 79"}}, t0)
	if st.State != Retired {
		t.Fatalf("state %s", st.State)
	}
	acts = st.Command(Command{Kind: CmdRelease, Actor: "op"}, t0.Add(time.Hour))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(time.Hour))
	acts = st.Report(Result{Action: acts[0], Outcome: Done}, t0.Add(time.Hour))
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(time.Hour))
	wantKinds(t, "a person approves", acts, ActRequestApproval)
	if by := repairOf(st).repairedBy(); by != "" {
		t.Fatalf("a retired device released by a person counts as repaired by %q", by)
	}
	if reviewOf(st).firstReviewPassed() {
		t.Fatal("a retired device counts as falsely quarantined")
	}
}

// A rule deleted by hand while the ladder's node step moves the node's holders ends the
// quarantine as an operator release, and clears what the step left on the node: its fences and
// its permit (#52, defect 10: every GPU of the node stayed unschedulable).
func TestRuleDeletedDuringAMoveEndsTheNodeStep(t *testing.T) {
	p := approvedReboot()
	p.Repair.Steps[1].Approval, p.Repair.Steps[1].Holders = false, policy.HoldersMove
	p.Migration.Enabled = true
	for _, moves := range []bool{true, false} {
		if !moves {
			p.Repair.Steps[1].Holders = policy.HoldersWait
		}
		st := NewState(dev, "node-1", p, false)
		st.Follow(trusted)
		acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
		st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
		acts = st.Observe(idle(2), t0)
		acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "reset exit 1"}}, t0)
		wantKinds(t, "reset failed", acts, ActAlert, ActRepair)
		st.Report(Result{Action: acts[1], Outcome: Done, Check: StepResult{Busy: true, Reason: "moving", Holders: []string{"ns/other"}}}, t0)
		acts = st.Report(Result{Action: Action{Kind: ActInspectRule}, Outcome: Done, Info: RuleInfo{Name: dev.TaintRuleName(), Actor: "bob"}}, t0.Add(time.Minute))
		if st.State != Released {
			t.Fatalf("state %s", st.State)
		}
		ended := false
		for _, a := range acts {
			ended = ended || a.Kind == ActEndNodeStep
		}
		if ended != moves {
			t.Fatalf("holders move %t: node step ended %t (%v)", moves, ended, kinds(acts))
		}
	}
}

// A step's approval asked again for the same try (the first ask refused) carries an ID of its
// own: the first ask's button approves nothing in the second, whose own does. Runs before the
// rule ask with the same ID.
func TestAStepAskedAgainHasAnIDOfItsOwn(t *testing.T) {
	for _, fresh := range []bool{true, false} {
		st, acts := trustedAtFirstStep(t, approvedReboot())
		r := st.Rules()
		r.FreshAsks = fresh
		st.Follow(r)
		st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "reset exit 1"}}, t0.Add(time.Minute))
		first, _ := st.StepApproval()
		st.Command(Command{Kind: CmdReject, Actor: "bo", Review: first}, t0.Add(2*time.Minute))
		acts = st.Tick(st.Quarantine.ExpiresAt)
		st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "XID 79"}}, st.Quarantine.ExpiresAt)
		second, step := st.StepApproval()
		if step != "node" || (second == first) == fresh {
			t.Fatalf("fresh %v: first ask %q, second %q (%s)", fresh, first, second, step)
		}
		if !fresh {
			continue
		}
		at := st.Quarantine.ExpiresAt.Add(time.Minute)
		if got := st.Command(Command{Kind: CmdApprove, Actor: "ana", Review: first}, at); len(got) != 0 || st.Quarantine.Ladder.Awaiting != true {
			t.Fatalf("the first ask's button approved the second: %v", kinds(got))
		}
		wantKinds(t, "approved with its own ID", st.Command(Command{Kind: CmdApprove, Actor: "ana", Review: second}, at), ActRepair)
	}
}
