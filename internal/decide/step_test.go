package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A signal is checked when it arrives: one that did not decode, a release of a retired device, or
// a command the state refuses is recorded and dropped; a valid one is the command.
func TestSignalledIsCheckedWhereItArrives(t *testing.T) {
	st, _ := trustedAtFirstStep(t, ladderPolicy())
	wantKinds(t, "bad payload", Step(st, Event{Kind: EventSignalled, At: t0, Command: Command{Kind: CmdExtend}, BadPayload: "unexpected end of JSON input"}))
	if st.Dropped != 1 || st.LastDropped != "extend signal dropped: payload does not decode: unexpected end of JSON input" {
		t.Fatalf("dropped %d: %q", st.Dropped, st.LastDropped)
	}
	wantKinds(t, "refused", Step(st, Event{Kind: EventSignalled, At: t0, Command: Command{Kind: CmdResume, Actor: "ops"}}))
	if st.Dropped != 2 || !strings.HasPrefix(st.LastDropped, "signal refused: ") {
		t.Fatalf("dropped %d: %q", st.Dropped, st.LastDropped)
	}
	acts := Step(st, Event{Kind: EventSignalled, At: t0, Command: Command{Kind: CmdExtend, Actor: "ops", Duration: policy.JSONDuration(time.Hour)}})
	wantKinds(t, "extend", acts, ActRefreshRule)
	if st.Dropped != 2 {
		t.Fatalf("a valid signal was dropped: %q", st.LastDropped)
	}
	st.State = Retired
	wantKinds(t, "release of a retired device", Step(st, Event{Kind: EventSignalled, At: t0, Command: Command{Kind: CmdRelease, Actor: "ops"}}))
	if st.State != Retired || !strings.Contains(st.LastDropped, "the device is retired") {
		t.Fatalf("state %s, dropped %q", st.State, st.LastDropped)
	}
}

// A release accepted while the device was not retired, that reaches the loop after its
// retirement, releases nothing; one accepted of the retired device starts its review.
func TestReleaseAcceptedBeforeRetirement(t *testing.T) {
	st, _ := trustedAtFirstStep(t, ladderPolicy())
	st.State = Retired
	ev := Event{Kind: EventCommanded, At: t0, Command: Command{Kind: CmdRelease, Actor: "ops"}, AcceptedIn: Quarantined, CheckRetired: true}
	wantKinds(t, "stale release", Step(st, ev))
	if st.State != Retired {
		t.Fatalf("state %s", st.State)
	}
	ev.AcceptedIn = Retired
	if acts := Step(st, ev); len(acts) == 0 || st.State != Recovering {
		t.Fatalf("release asked of the retired device: actions %v, state %s", kinds(acts), st.State)
	}
}

// Accept binds an approval that names no ask to the one waiting, and checks the command.
func TestAcceptBindsToTheAskWaiting(t *testing.T) {
	st := toTrustedApproval(t)
	c, err := Accept(st, Command{Kind: CmdApprove, Actor: "ops"})
	if err != nil || c.Review == "" || c.Review != st.Ask() {
		t.Fatalf("bound to %q (%v), waiting %q", c.Review, err, st.Ask())
	}
	for _, k := range []CommandKind{CmdReleaseApproval, CmdReject} {
		if c, _ := Accept(st, Command{Kind: k, Actor: "ops"}); c.Review != st.Ask() {
			t.Fatalf("%s bound to %q, waiting %q", k, c.Review, st.Ask())
		}
	}
	if c, _ := Accept(st, Command{Kind: CmdExtend, Actor: "ops", Duration: policy.JSONDuration(time.Hour)}); c.Review != "" {
		t.Fatalf("an extension was bound to an ask: %q", c.Review)
	}
	if _, err := Accept(st, Command{Kind: CmdApprove, Actor: "ops", Review: "repair-1"}); err == nil {
		t.Fatal("an approval of another ask was accepted")
	}
	st.Follow(Rules{ReleasePath: true, Repair: true})
	if c, _ := Accept(st, Command{Kind: CmdApprove, Actor: "ops"}); c.Review != "" {
		t.Fatalf("bound without LadderTrust: %q", c.Review)
	}
}

// Prepare gives each action what its activity needs, from the state as it is taken up.
func TestPrepareCarriesWhatTheActivityNeeds(t *testing.T) {
	st, acts := trustedAtFirstStep(t, ladderPolicy())
	a := Prepare(st, acts[0])
	p := a.Plan
	if p.Drop != "" || p.Step.Kind != policy.RepairReset || p.Try != 1 || p.Review != 1 || !p.TryAt.Equal(t0) ||
		len(p.Targets) != 1 || p.Targets[0] != dev || len(p.Idle) != 1 || p.Idle[0] != dev {
		t.Fatalf("repair plan %+v", p)
	}
	acts = Step(st, Event{Kind: EventResult, At: t0.Add(time.Minute), Result: Result{Action: a, Outcome: Done, Check: pass(t0.Add(time.Minute))}})
	wantKinds(t, "reset done", acts, ActProbe)
	p = Prepare(st, acts[0]).Plan
	if p.Idle != nil || p.Try != 0 || p.Review != 1 || len(p.Targets) != 1 {
		t.Fatalf("probe plan %+v", p)
	}
	rel := Prepare(st, Action{Kind: ActRelease}).Plan
	if !rel.QuarantinedAt.Equal(t0) || rel.RepairedBy != "reset" {
		t.Fatalf("release plan %+v", rel)
	}
	taint := Prepare(st, Action{Kind: ActTaint, To: Quarantined}).Plan
	if taint.Lease != fenceOf(st).lease() || taint.UnitUnknown {
		t.Fatalf("taint plan %+v", taint)
	}
	st.Quarantine = nil
	if p := Prepare(st, Action{Kind: ActRetire}).Plan; p.Drop == "" {
		t.Fatal("an action on a closed quarantine was not dropped")
	}
	if p := Prepare(st, Action{Kind: ActAlert}).Plan; p.Drop != "" || p.Channel != st.Policy.SlackChannel {
		t.Fatalf("alert plan %+v", p)
	}
}

// A node step's approval request names its ask; a unit's taint waits for its forms.
func TestPrepareNamesTheAsk(t *testing.T) {
	st := toTrustedApproval(t)
	st.Policy.SlackChannel = "#gpu"
	p := Prepare(st, Action{Kind: ActRequestApproval}).Plan
	id, step := st.StepApproval()
	if p.Ask != id || p.AskStep != step || step != "node" || p.Channel != "#gpu" || p.QuarantineReason != st.Quarantine.Reason {
		t.Fatalf("approval plan %+v", p)
	}
	if p := Prepare(st, Action{Kind: ActEndNodeStep}).Plan; p.Step.Kind != policy.RepairNode {
		t.Fatalf("end node step plan %+v", p)
	}
	unit := NewState(device.ID{Driver: dev.Driver, Pool: dev.Pool, Device: "counters=gpu-0"}, "node-1", policy.Default(), false)
	if !Prepare(unit, Action{Kind: ActTaint, To: Quarantined}).Plan.UnitUnknown {
		t.Fatal("a unit whose forms are unknown was planned a taint")
	}
}

// Look says where the device stands, as the loop reads it.
func TestLookSaysWhereTheDeviceStands(t *testing.T) {
	st, _ := trustedAtFirstStep(t, ladderPolicy())
	v := Look(st)
	if v.State != Quarantined || v.Idle || v.RepairStep != "reset 1/2" || v.LastReason != st.Transitions[len(st.Transitions)-1].Reason || v.Summary == "" {
		t.Fatalf("view %+v", v)
	}
	if v := Look(NewState(dev, "node-1", policy.Default(), false)); !v.Idle || v.LastReason != "" || !v.Deadline.IsZero() {
		t.Fatalf("new device's view %+v", v)
	}
}

// A probe runs under its own class when the check names one, else the device's; a ladder that
// stands past its last step, or has no try yet, plans a zero step and no try time.
func TestPrepareCheckEdges(t *testing.T) {
	st, acts := trustedAtFirstStep(t, ladderPolicy())
	st.DeviceClass = "gpu.example.com"
	probe := Action{Kind: ActProbe, Check: &policy.Check{}}
	if p := Prepare(st, probe).Plan; p.DeviceClass != "gpu.example.com" {
		t.Fatalf("probe class %q", p.DeviceClass)
	}
	probe.Check.DeviceClass = "probe.example.com"
	if p := Prepare(st, probe).Plan; p.DeviceClass != "probe.example.com" {
		t.Fatalf("probe class %q, want the check's", p.DeviceClass)
	}
	l := st.Quarantine.Ladder
	l.Step = len(st.Policy.Repair.Steps)
	if p := Prepare(st, acts[0]).Plan; p.Step.Kind != "" {
		t.Fatalf("a ladder past its last step planned %+v", p.Step)
	}
	if v := Look(st); v.RepairStep != "reset 1/2" {
		t.Fatalf("past its last step, the ladder shows %q: want its last try against the last step", v.RepairStep)
	}
	l.Step, l.Tries = 0, nil
	if p := Prepare(st, acts[0]).Plan; !p.TryAt.IsZero() || p.Try != 0 || p.Step.Kind != policy.RepairReset {
		t.Fatalf("no try yet: %+v", p)
	}
}

// A unit with no whole form is reset once, through its first form (LadderTrust); before, once
// per form. Its probe still runs on every form.
func TestRepairTargetOfAUnitWithoutAWholeForm(t *testing.T) {
	p := ladderPolicy()
	st := quarantinedUnit(p, "g-a", "g-b", "g-c")
	st.Unit.Whole = ""
	st.Follow(trusted)
	st.Quarantine.Ladder = &Ladder{Tries: []RepairTry{{Kind: policy.RepairReset, Attempt: 1, At: t0}}}
	if got := Prepare(st, Action{Kind: ActRepair, Check: &policy.Check{}}).Plan.Targets; len(got) != 1 || got[0].Device != "g-a" {
		t.Fatalf("reset targets %v, want the first form alone", got)
	}
	if got := Prepare(st, Action{Kind: ActProbe, Check: &policy.Check{}}).Plan.Targets; len(got) != 3 {
		t.Fatalf("probe targets %v, want every form", got)
	}
	st.Follow(Rules{ReleasePath: true, Repair: true})
	if got := Prepare(st, Action{Kind: ActRepair, Check: &policy.Check{}}).Plan.Targets; len(got) != 3 {
		t.Fatalf("reset targets before LadderTrust %v, want every form", got)
	}
}

// The repair step shows through the review that follows the step, and not once it ends.
func TestRepairStepShowsThroughTheReview(t *testing.T) {
	st, acts := trustedAtFirstStep(t, ladderPolicy())
	acts = Step(st, Event{Kind: EventResult, At: t0.Add(time.Minute), Result: Result{Action: acts[0], Outcome: Done, Check: pass(t0.Add(time.Minute))}})
	wantKinds(t, "reset done", acts, ActProbe)
	if v := Look(st); v.State != Recovering || v.RepairStep != "reset 1/2" {
		t.Fatalf("in review: %+v", v)
	}
	st.State = Released
	if v := Look(st); v.RepairStep != "" {
		t.Fatalf("released: %q", v.RepairStep)
	}
}
