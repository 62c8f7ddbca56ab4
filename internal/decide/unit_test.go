package decide

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func testUnit(devices ...string) *device.Unit {
	return &device.Unit{ID: device.UnitID{Driver: dev.Driver, Pool: dev.Pool, Key: "counters=set"}, Devices: devices, Whole: devices[0]}
}

func quarantinedUnit(p policy.Policy, devices ...string) *DeviceState {
	o := obs(device.Unhealthy, 1, "")
	o.Unit = testUnit(devices...)
	return quarantinedBy(p, o)
}

func TestUnitMembershipWhileFenced(t *testing.T) {
	st := NewState(dev, "node-1", policy.Default(), false)
	st.rules.ReleasePath = true
	o := obs(device.Unknown, 1, "")
	o.Unit = testUnit("g", "g-a", "g-b")
	st.Observe(o, t0)
	o = obs(device.Unknown, 2, "")
	o.Unit = testUnit("g", "g-a") // reconfigured before any fence: the unit is what is published
	st.Observe(o, t0)
	if !slices.Equal(unitOf(st).members(), []string{"g", "g-a"}) {
		t.Fatalf("unfenced members %v", unitOf(st).members())
	}
	o = obs(device.Unhealthy, 3, "")
	o.Unit = testUnit("g", "g-a")
	for _, a := range st.Observe(o, t0) {
		if a.Kind == ActTaint {
			fenceOf(st).applied(a, "r", t0)
		}
	}
	if st.State != Quarantined {
		t.Fatalf("state %s", st.State)
	}
	o = obs(device.Unhealthy, 4, "")
	o.Unit = testUnit("g", "g-c")
	acts := st.Observe(o, t0.Add(time.Minute))
	if len(acts) == 0 || acts[0].Kind != ActFenceMembers || acts[0].Key != TaintQuarantine || acts[0].Effect != policy.EffectNoSchedule {
		t.Fatalf("actions on growth while fenced %+v", acts)
	}
	if !slices.Equal(unitOf(st).members(), []string{"g", "g-a", "g-c"}) {
		t.Fatalf("fenced members %v: want every form seen while fenced", unitOf(st).members())
	}
	acts = fenceOf(st).ruleSeen(RuleInfo{Name: "r", Present: true, Key: TaintQuarantine, Effect: policy.EffectNoSchedule, Missing: []string{"g-a"}}, t0.Add(2*time.Minute))
	if len(acts) != 1 || acts[0].Kind != ActFenceMembers || st.State != Quarantined {
		t.Fatalf("a form's rule missing: %+v, state %s", acts, st.State)
	}
	if targets := unitOf(st).checkTargets(); len(targets) != 1 || targets[0].Device != "g" {
		t.Fatalf("check targets %v, want the whole device", targets)
	}
}

func TestUnitHoldersMoveOnceEach(t *testing.T) {
	p := policy.Default()
	p.Migration.Enabled = true
	st := quarantinedUnit(p, "g", "g-a", "g-b")
	unitOf(st).movingStarted(fenceOf(st).migrationPods(Action{To: Quarantined})) // what the decision's taint moved
	if got := unitOf(st).holdersToMove(); len(got) != 0 {
		t.Fatalf("holders to move right after the decision: %v", got)
	}
	o := obs(device.Unhealthy, 2, "")
	o.Unit = testUnit("g", "g-a", "g-b")
	o.Reporters = append(o.Reporters, Reporter{Namespace: "ns", Pod: "sibling", Device: "g-b", Health: device.Healthy})
	st.Observe(o, t0.Add(time.Second))
	got := unitOf(st).holdersToMove()
	if len(got) != 1 || got[0].Name != "sibling" {
		t.Fatalf("holders to move %v, want the sibling", got)
	}
	unitOf(st).movingStarted(got)
	if got := unitOf(st).holdersToMove(); len(got) != 0 {
		t.Fatalf("moved twice: %v", got)
	}
	st.Unit = nil
	st.Moving = nil
	if got := unitOf(st).holdersToMove(); len(got) != 0 {
		t.Fatalf("a device of its own: %v", got)
	}
}

func TestForceQuarantineWaitsForTheUnitsDevices(t *testing.T) {
	id := device.ID{Driver: dev.Driver, Pool: dev.Pool, Device: "counters=set"}
	st := NewState(id, "node-1", policy.Default(), false)
	st.rules.ReleasePath = true
	cmd := Command{Kind: CmdForceQuarantine, Actor: "alice"}
	if err := st.Validate(cmd); err == nil || !strings.Contains(err.Error(), "not known yet") {
		t.Fatalf("force-quarantine of a unit of unknown devices: %v", err)
	}
	o := obs(device.Healthy, 1, "")
	o.Device, o.Unit = id, testUnit("g", "g-a")
	st.Observe(o, t0)
	if err := st.Validate(cmd); err != nil {
		t.Fatalf("force-quarantine once the devices are known: %v", err)
	}
	if unitOf(NewState(dev, "node-1", policy.Default(), false)).unitUnknown() {
		t.Fatal("a plain device read as a unit of unknown devices")
	}
}

func TestUnitFenceExtendsWithTheStandingKey(t *testing.T) {
	st := quarantinedUnit(policy.Default(), "g", "g-a")
	reviewOf(st).startReview("test", "alice", t0)
	if st.Review == nil || st.Review.Stage != StageProbe {
		t.Fatalf("review %+v", st.Review)
	}
	if a := unitOf(st).fenceMembers("x"); a.Key != TaintQuarantine {
		t.Fatalf("key while probing %s", a.Key)
	}
	reviewOf(st).toProbation()
	if a := unitOf(st).fenceMembers("x"); a.Key != TaintProbation || a.Effect != policy.EffectNoSchedule {
		t.Fatalf("key on probation %s %s", a.Key, a.Effect)
	}
	u := testUnit("g2", "g", "g-a")
	unitOf(st).joinUnit(u)
	if st.Unit.Whole != "g2" {
		t.Fatalf("whole device %q, want the report's g2", st.Unit.Whole)
	}
	u = testUnit("g", "g-a")
	u.Whole = ""
	unitOf(st).joinUnit(u)
	if st.Unit.Whole != "g2" {
		t.Fatalf("a report without a whole device dropped it: %q", st.Unit.Whole)
	}
}

func TestUnitHoldersMoveOnlyFromAQuarantine(t *testing.T) {
	p := policy.Default()
	p.Migration.Enabled = true
	st := quarantinedUnit(p, "g", "g-a")
	unitOf(st).movingStarted(unitOf(st).holdersToMove())
	fenceOf(st).closeRecord("alice", "test", t0)
	st.State = Restricted
	st.Quarantine = &QuarantineRecord{RuleName: "r"}
	if got := unitOf(st).holdersToMove(); got != nil {
		t.Fatalf("holders moved from a restricted unit: %v", got)
	}
	st.State = Quarantined
	if got := unitOf(st).holdersToMove(); len(got) != 1 || got[0].Name != "p" {
		t.Fatalf("holders of a new quarantine %v, want p again", got)
	}
}

func TestSilentHoldersAreNoEvidence(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	silent := Reporter{Namespace: "ns", Pod: "sibling", Health: device.Healthy, Device: "gpu-0-mig-1", Silent: true}
	spoke := Reporter{Namespace: "ns", Pod: "user", Health: device.Healthy, Device: "gpu-0-mig-0"}
	restricted := func(on bool) *DeviceState {
		st := NewState(dev, "node-1", policy.Default(), false)
		st.rules.ReleasePath, st.rules.SilentNoEvidence = true, on
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
