package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

var withCauses = Rules{ReleasePath: true, Repair: true, StepAlerts: true, LadderTrust: true, StepReports: true, DetectorsNotHolders: true, Causes: true}

// faultOf is an Unhealthy report of a Pod-held device with its cause.
func faultOf(version int, c cause.Cause) Observation {
	o := obs(device.Unhealthy, version, "")
	o.Cause = &c
	return o
}

// fenced takes a fault on a device of a reset-then-reboot ladder and returns the actions once
// the quarantine stands and no Pod holds the device.
func fenced(t *testing.T, p policy.Policy, r Rules, c cause.Cause) (*DeviceState, []Action) {
	t.Helper()
	st := NewState(dev, "node-1", p, false)
	st.Follow(r)
	acts := st.Observe(faultOf(1, c), t0)
	if len(acts) == 0 || acts[0].Kind != ActTaint {
		t.Fatalf("%s: no fence: %v", c, kinds(acts))
	}
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
	if st.State == Retired {
		return st, acts
	}
	o := idle(2)
	o.Cause = &c
	return st, st.Observe(o, t0)
}

// The cause chooses the first step: a reboot-first fault starts at the node step (no reset), a
// reset-first one at the reset, the driver's recovery action wins over the table, a replace fault
// is retired at once, and an unknown cause climbs from the first step as before.
func TestTheCauseChoosesTheFirstStep(t *testing.T) {
	p := approvedReboot()
	p.Repair.Steps[1].Approval = false
	for _, tt := range []struct {
		name  string
		c     cause.Cause
		first policy.RepairKind // "" retired
	}{
		{"xid 79: the node step", cause.Cause{Code: "xid:79", XID: 79}, policy.RepairNode},
		{"xid 48: the reset", cause.Cause{XID: 48}, policy.RepairReset},
		{"recovery gpu-reset over xid 79", cause.Cause{XID: 79, Recovery: cause.RecoveryGPUReset}, policy.RepairReset},
		{"recovery node-reboot over xid 48", cause.Cause{XID: 48, Recovery: cause.RecoveryNodeReboot}, policy.RepairNode},
		{"unknown cause", cause.Cause{XID: 74}, policy.RepairReset},
		{"no cause", cause.Cause{}, policy.RepairReset},
		{"row remap failure: retired", cause.Cause{Code: "row-remap-failure"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, acts := fenced(t, p, withCauses, tt.c)
			if tt.first == "" {
				if st.State != Retired || len(acts) == 0 || acts[0].Kind != ActRetire || !strings.Contains(acts[0].Reason, tt.c.String()+" needs a replacement") {
					t.Fatalf("state %s, acts %+v", st.State, acts)
				}
				if l := st.Quarantine.Ladder; len(l.Tries) != 0 {
					t.Fatalf("a step ran before the retirement: %+v", l.Tries)
				}
				return
			}
			wantKinds(t, "idle", acts, ActRepair)
			if said := strings.Contains(st.Quarantine.Reason, "first step:"); said != tt.c.Known() {
				t.Fatalf("reason %q: the first step is said only of a known cause", st.Quarantine.Reason)
			}
			if l := st.Quarantine.Ladder; len(l.Tries) != 1 || l.Tries[0].Kind != tt.first {
				t.Fatalf("tries %+v, want the first to be %s", l.Tries, tt.first)
			}
			if tt.c.Known() && (st.Quarantine.Cause == nil || *st.Quarantine.Cause != tt.c || st.Quarantine.Choice == nil) {
				t.Fatalf("the record keeps cause %+v choice %+v", st.Quarantine.Cause, st.Quarantine.Choice)
			}
			ch := cause.Choose(tt.c, p.Causes)
			want := tt.c.String() + " -> " + string(ch.First) + " (" + ch.Why + ")"
			if !tt.c.Known() {
				want = "" // nothing to search by
			}
			if got := Look(st).Cause; got != want {
				t.Fatalf("search attribute %q, want %q", got, want)
			}
			if v := Look(st).Device().Quarantine; v.First != string(ch.First) || v.FirstWhy != ch.Why || v.Cause != tt.c.String() {
				t.Fatalf("view %+v", v)
			}
		})
	}
	// Runs recorded before causes climb from the first step, whatever the cause.
	_, acts := fenced(t, p, trusted, cause.Cause{Code: "row-remap-failure"})
	wantKinds(t, "idle", acts, ActRepair)
}

// A cause whose reset is its one chance (XID 64) retires the device when the reset fails.
func TestAFailedResetRetiresAReplaceCandidate(t *testing.T) {
	st, acts := fenced(t, approvedReboot(), withCauses, cause.Cause{XID: 64})
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "reset exit 1"}}, t0.Add(time.Minute))
	if st.State != Retired || !strings.Contains(st.Transitions[len(st.Transitions)-1].Reason, "then needs a replacement") {
		t.Fatalf("state %s: %v %+v", st.State, kinds(acts), st.Transitions[len(st.Transitions)-1])
	}
}

// An application's fault fences nothing: the tenant is told, the device counts it, and the
// limit-th within the window fences the device as its own fault. A Pod status that changes for
// another reason, with the same fault, is no new one.
func TestApplicationFaultsFenceNothingUntilTheyPileUp(t *testing.T) {
	p := ladderPolicy()
	p.Causes.ApplicationFaults = policy.Threshold{Limit: 3, Window: policy.JSONDuration(time.Hour)}
	st := NewState(dev, "node-1", p, false)
	st.Follow(withCauses)
	app := cause.Cause{XID: 13}
	acts := st.Observe(faultOf(1, app), t0)
	wantKinds(t, "first", acts, ActAppFault)
	if st.State != Healthy || len(st.AppFaults) != 1 || st.AppFaultsTotal != 1 || !strings.Contains(acts[0].Reason, "stays in service (1 of 3") {
		t.Fatalf("state %s, faults %v, act %+v", st.State, st.AppFaults, acts[0])
	}
	if p := Prepare(st, acts[0]).Plan; len(p.Reporters) != 1 || p.Reporters[0].Pod != "p" {
		t.Fatalf("the tenant's Pods are not told: %+v", p.Reporters)
	}
	wantKinds(t, "the same fault in a newer status", st.Observe(faultOf(2, app), t0.Add(time.Minute)))
	st.Observe(obs(device.Healthy, 3, ""), t0.Add(2*time.Minute))
	// An old fault leaves the window.
	st.AppFaults[0] = t0.Add(-2 * time.Hour)
	wantKinds(t, "second", st.Observe(faultOf(4, app), t0.Add(3*time.Minute)), ActAppFault)
	st.Observe(obs(device.Healthy, 5, ""), t0.Add(4*time.Minute))
	acts = st.Observe(faultOf(6, cause.Cause{XID: 31}), t0.Add(5*time.Minute))
	wantKinds(t, "third within the hour", acts, ActAppFault)
	st.Observe(obs(device.Healthy, 7, ""), t0.Add(6*time.Minute))
	acts = st.Observe(faultOf(8, app), t0.Add(7*time.Minute))
	wantKinds(t, "the limit", acts, ActTaint, ActAlert)
	if acts[0].Choice == nil || acts[0].Choice.First != policy.FirstLadder || !strings.Contains(acts[0].Reason, "3 application faults within 1h0m0s") {
		t.Fatalf("taint %+v", acts[0])
	}
	if st.AppFaultsTotal != 4 || len(st.AppFaults) != 0 {
		t.Fatalf("total %d, window %v", st.AppFaultsTotal, st.AppFaults)
	}
	// Before causes, an application's fault is fenced like any other.
	old := NewState(dev, "node-1", p, false)
	old.Follow(trusted)
	wantKinds(t, "before causes", old.Observe(faultOf(1, app), t0), ActTaint, ActAlert)
}

// A policy that turns causes off fences every fault and climbs from the first step.
func TestCausesOff(t *testing.T) {
	p := ladderPolicy()
	p.Causes.Off = true
	st := NewState(dev, "node-1", p, false)
	st.Follow(withCauses)
	wantKinds(t, "off", st.Observe(faultOf(1, cause.Cause{XID: 13}), t0), ActTaint, ActAlert)
}

// Uncorrectable remapped rows that grew are a remap pending until the GPU resets: the fault
// starts at the reset, which applies it. A remap that failed still retires the GPU, and runs
// before the rule retire both at once, as they did.
func TestARemappedRowStartsAtAReset(t *testing.T) {
	rows := cause.Cause{Code: "uncorrectable-remapped-rows"}
	r := withCauses
	r.RemapsReset = true
	st, _ := fenced(t, approvedReboot(), r, rows)
	if st.State == Retired || st.Quarantine.Choice == nil || st.Quarantine.Choice.First != policy.FirstReset {
		t.Fatalf("remapped rows: %s, choice %+v", st.State, st.Quarantine.Choice)
	}
	if st, _ := fenced(t, approvedReboot(), r, cause.Cause{Code: "row-remap-failure"}); st.State != Retired {
		t.Fatalf("a failed remap: %s", st.State)
	}
	if st, _ := fenced(t, approvedReboot(), withCauses, rows); st.State != Retired {
		t.Fatalf("before the rule: %s", st.State)
	}
}

// A release carries its quarantine's cause class and first step for the time-to-repair metric.
func TestAReleaseNamesItsCauseClassAndFirstStep(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	st.Quarantine.Cause = &cause.Cause{XID: 48, PCI: "0000:3b:00"}
	st.Quarantine.Choice = &cause.Choice{First: policy.FirstReset, Why: "catalogue: xid 48"}
	p := Prepare(st, Action{Kind: ActRelease}).Plan
	if p.CauseClass != "xid 48" || p.FirstStep != "reset" {
		t.Fatalf("plan %+v", p)
	}
	st.Quarantine.Cause, st.Quarantine.Choice = nil, nil
	if p := Prepare(st, Action{Kind: ActRelease}).Plan; p.CauseClass != "unknown" || p.FirstStep != "ladder" {
		t.Fatalf("plan of a quarantine with no cause %+v", p)
	}
}

// A release lifts the fences a reset of a wider domain may have left, as a step that moves holders
// does: the device alone leaves none to lift.
func TestAReleaseLiftsAWideResetsFences(t *testing.T) {
	p := ladderPolicy()
	st, _ := onLadder(t, p)
	if Prepare(st, Action{Kind: ActRelease}).Plan.NodeFence {
		t.Fatal("a reset of the device alone has fences to lift")
	}
	st.Policy.ResetDomain = "attribute:baseboard"
	if !Prepare(st, Action{Kind: ActRelease}).Plan.NodeFence {
		t.Fatal("a reset of a baseboard's fences stay after the release")
	}
}
