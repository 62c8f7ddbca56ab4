package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

func unitOf(devices ...string) *device.Unit {
	return &device.Unit{ID: device.UnitID{Driver: dev.Driver, Pool: dev.Pool, Key: "counters=set"}, Devices: devices, Whole: devices[0]}
}

// quarantinedUnit returns a release-path state of the unit of devices, quarantined at t0.
func quarantinedUnit(p Policy, devices ...string) *DeviceState {
	o := obs(device.Unhealthy, 1, "")
	o.Unit = unitOf(devices...)
	return quarantinedBy(p, o)
}

// A unit takes the forms it is published as while unfenced; fenced, it keeps every form it had
// and fences the new ones (with the standing key), and a form whose rule went missing is fenced
// again rather than read as a release.
func TestUnitMembershipWhileFenced(t *testing.T) {
	st := NewState(dev, "node-1", Default(), false)
	st.ReleasePath = true
	o := obs(device.Unknown, 1, "")
	o.Unit = unitOf("g", "g-a", "g-b")
	st.Observe(o, t0)
	o = obs(device.Unknown, 2, "")
	o.Unit = unitOf("g", "g-a") // reconfigured before any fence: the unit is what is published
	st.Observe(o, t0)
	if !slices.Equal(st.Members(), []string{"g", "g-a"}) {
		t.Fatalf("unfenced members %v", st.Members())
	}
	o = obs(device.Unhealthy, 3, "")
	o.Unit = unitOf("g", "g-a")
	for _, a := range st.Observe(o, t0) {
		if a.Kind == ActTaint {
			st.Applied(a, "r", t0)
		}
	}
	if st.State != Quarantined {
		t.Fatalf("state %s", st.State)
	}
	o = obs(device.Unhealthy, 4, "")
	o.Unit = unitOf("g", "g-c")
	acts := st.Observe(o, t0.Add(time.Minute))
	if len(acts) == 0 || acts[0].Kind != ActFenceMembers || acts[0].Key != TaintQuarantine || acts[0].Effect != EffectNoSchedule {
		t.Fatalf("actions on growth while fenced %+v", acts)
	}
	if !slices.Equal(st.Members(), []string{"g", "g-a", "g-c"}) {
		t.Fatalf("fenced members %v: want every form seen while fenced", st.Members())
	}
	acts = st.RuleSeen(RuleInfo{Name: "r", Present: true, Key: TaintQuarantine, Effect: EffectNoSchedule, Missing: []string{"g-a"}}, t0.Add(2*time.Minute))
	if len(acts) != 1 || acts[0].Kind != ActFenceMembers || st.State != Quarantined {
		t.Fatalf("a form's rule missing: %+v, state %s", acts, st.State)
	}
	if targets := st.CheckTargets(); len(targets) != 1 || targets[0].Device != "g" {
		t.Fatalf("check targets %v, want the whole device", targets)
	}
}

// The Pods on a quarantined unit move once each: those known at the decision, then a sibling
// form's Pod learnt of later; a device of its own is left to the decision's migrations.
func TestUnitHoldersMoveOnceEach(t *testing.T) {
	p := Default()
	p.Migration.Enabled = true
	st := quarantinedUnit(p, "g", "g-a", "g-b")
	st.MovingStarted(st.MigrationPods(Action{To: Quarantined})) // what the decision's taint moved
	if got := st.HoldersToMove(); len(got) != 0 {
		t.Fatalf("holders to move right after the decision: %v", got)
	}
	o := obs(device.Unhealthy, 2, "")
	o.Unit = unitOf("g", "g-a", "g-b")
	o.Reporters = append(o.Reporters, Reporter{Namespace: "ns", Pod: "sibling", Device: "g-b", Health: device.Healthy})
	st.Observe(o, t0.Add(time.Second))
	got := st.HoldersToMove()
	if len(got) != 1 || got[0].Name != "sibling" {
		t.Fatalf("holders to move %v, want the sibling", got)
	}
	st.MovingStarted(got)
	if got := st.HoldersToMove(); len(got) != 0 {
		t.Fatalf("moved twice: %v", got)
	}
	st.Unit = nil
	st.Moving = nil
	if got := st.HoldersToMove(); len(got) != 0 {
		t.Fatalf("a device of its own: %v", got)
	}
}

// A unit's workflow that has not heard which devices it is refuses a force-quarantine (its ID
// selects no device), and takes one once an observation names them.
func TestForceQuarantineWaitsForTheUnitsDevices(t *testing.T) {
	id := device.ID{Driver: dev.Driver, Pool: dev.Pool, Device: "counters=set"}
	st := NewState(id, "node-1", Default(), false)
	st.ReleasePath = true
	cmd := Command{Kind: CmdForceQuarantine, Actor: "alice"}
	if err := st.Validate(cmd); err == nil || !strings.Contains(err.Error(), "not known yet") {
		t.Fatalf("force-quarantine of a unit of unknown devices: %v", err)
	}
	o := obs(device.Healthy, 1, "")
	o.Device, o.Unit = id, unitOf("g", "g-a")
	st.Observe(o, t0)
	if err := st.Validate(cmd); err != nil {
		t.Fatalf("force-quarantine once the devices are known: %v", err)
	}
	if NewState(dev, "node-1", Default(), false).UnitUnknown() {
		t.Fatal("a plain device read as a unit of unknown devices")
	}
}

// A standing fence extends with the key it stands on: the quarantine key while a probe runs,
// probation's once the unit is on probation; a report naming a whole device keeps it current.
func TestUnitFenceExtendsWithTheStandingKey(t *testing.T) {
	st := quarantinedUnit(Default(), "g", "g-a")
	st.startReview("test", "alice", t0)
	if st.Review == nil || st.Review.Stage != StageProbe {
		t.Fatalf("review %+v", st.Review)
	}
	if a := st.fenceMembers("x"); a.Key != TaintQuarantine {
		t.Fatalf("key while probing %s", a.Key)
	}
	st.toProbation()
	if a := st.fenceMembers("x"); a.Key != TaintProbation || a.Effect != EffectNoSchedule {
		t.Fatalf("key on probation %s %s", a.Key, a.Effect)
	}
	u := unitOf("g2", "g", "g-a")
	st.joinUnit(u)
	if st.Unit.Whole != "g2" {
		t.Fatalf("whole device %q, want the report's g2", st.Unit.Whole)
	}
	u = unitOf("g", "g-a")
	u.Whole = ""
	st.joinUnit(u)
	if st.Unit.Whole != "g2" {
		t.Fatalf("a report without a whole device dropped it: %q", st.Unit.Whole)
	}
}

// Holders move only from a quarantined unit (a restricted one keeps its Pods: Unknown moves no
// job), and a new quarantine moves the Pods an earlier one had moved, should they be back.
func TestUnitHoldersMoveOnlyFromAQuarantine(t *testing.T) {
	p := Default()
	p.Migration.Enabled = true
	st := quarantinedUnit(p, "g", "g-a")
	st.MovingStarted(st.HoldersToMove())
	st.closeRecord("alice", "test", t0)
	st.State = Restricted
	st.Quarantine = &QuarantineRecord{RuleName: "r"}
	if got := st.HoldersToMove(); got != nil {
		t.Fatalf("holders moved from a restricted unit: %v", got)
	}
	st.State = Quarantined
	if got := st.HoldersToMove(); len(got) != 1 || got[0].Name != "p" {
		t.Fatalf("holders of a new quarantine %v, want p again", got)
	}
}

// A restricted unit whose remaining reporters are silent holders (Pods on sibling forms that said
// nothing) has no word that the device works: no review starts, and once a Pod does report
// Healthy the review skips probe and canary only on that Pod's word (#40, check). Before, the
// silent holders' Healthy started the review and stood for the probe and the canary. A run from
// before the change (SilentNoEvidence off) decides as it did.
func TestSilentHoldersAreNoEvidence(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	silent := Reporter{Namespace: "ns", Pod: "sibling", Health: device.Healthy, Device: "gpu-0-mig-1", Silent: true}
	spoke := Reporter{Namespace: "ns", Pod: "user", Health: device.Healthy, Device: "gpu-0-mig-0"}
	restricted := func(on bool) *DeviceState {
		st := NewState(dev, "node-1", Default(), false)
		st.ReleasePath, st.SilentNoEvidence = true, on
		st.State = Restricted
		st.Quarantine = &QuarantineRecord{CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
		return st
	}
	version := 8
	obs := func(reps ...Reporter) Observation {
		version++
		return Observation{Device: dev, Node: "node-1", Health: device.Healthy, StatusVersion: fmt.Sprint(version), ObservedAt: t0, Reporters: reps}
	}
	st := restricted(true)
	st.Observe(obs(silent), t0.Add(time.Minute))
	if st.State != Restricted || st.Review != nil {
		t.Fatalf("silent holders alone started a review: %s %+v", st.State, st.Review)
	}
	st.Observe(obs(silent, spoke), t0.Add(2*time.Minute))
	if st.State != Recovering || st.Review == nil || !st.Review.ProbeSkipped {
		t.Fatalf("a Pod's own Healthy: %s %+v", st.State, st.Review)
	}
	old := restricted(false)
	old.Observe(obs(silent), t0.Add(time.Minute))
	if old.State != Recovering || !old.Review.ProbeSkipped || !old.Review.CanarySkipped {
		t.Fatalf("a run from before the change decided otherwise: %s %+v", old.State, old.Review)
	}
}
