package decide

import (
	"slices"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A device published in several forms (a GPU and its partitions) is one physical unit: the
// watcher sends its forms' reports as one observation, keyed by the unit, and the workflow fences,
// probes and releases the unit as a whole.

// joinUnit takes the unit's devices from an observation and returns those new to a standing
// fence. While fenced, the unit keeps every device it was seen with: each has a rule until the
// release, even one a reconfiguration took away. Otherwise the unit is what the driver publishes now.
func (g unitView) joinUnit(u *device.Unit) []string {
	st := g.st
	if u == nil {
		return nil
	}
	if st.Unit == nil || !fenceOf(st).fenced() {
		c := *u
		c.Devices = slices.Clone(u.Devices)
		st.Unit = &c
		return nil
	}
	var grew []string
	for _, d := range u.Devices {
		if !slices.Contains(st.Unit.Devices, d) {
			grew = append(grew, d)
		}
	}
	if len(grew) > 0 {
		st.Unit.Devices = append(st.Unit.Devices, grew...)
		slices.Sort(st.Unit.Devices)
	}
	if u.Whole != "" {
		st.Unit.Whole = u.Whole
	}
	return grew
}

// members are the device names a fence covers: the unit's devices, or nil for a device that is
// a unit of its own.
func (g unitView) members() []string {
	st := g.st
	if st.Unit == nil {
		return nil
	}
	return st.Unit.Devices
}

// checkTargets are the devices a probe or canary must pass on: the device itself; for a unit,
// its whole device, or every device when the driver offers no whole form.
func (g unitView) checkTargets() []device.ID {
	st := g.st
	if st.Unit == nil {
		return []device.ID{st.Device}
	}
	if st.Unit.Whole != "" {
		return []device.ID{{Driver: st.Device.Driver, Pool: st.Device.Pool, Device: st.Unit.Whole}}
	}
	return st.Unit.DeviceIDs()
}

// repairTarget is the one device a reset runs on: the device itself; for a unit, its whole
// device, else its first form. A reset resets the physical GPU through any of its forms, so one
// run serves them all (before LadderTrust, a unit with no whole form was reset once per form).
func (g unitView) repairTarget() []device.ID {
	st := g.st
	targets := g.checkTargets()
	if st.rules.LadderTrust && len(targets) > 1 {
		return targets[:1]
	}
	return targets
}

// fenceMembers re-applies the standing fence to every device of the unit.
func (g unitView) fenceMembers(reason string) Action {
	st := g.st
	q := st.Quarantine
	key, effect := TaintQuarantine, fenceOf(st).wantEffect(reviewOf(st).stateBeforeReview())
	if r := st.Review; r != nil && r.Stage != StageProbe {
		key, effect = TaintProbation, policy.EffectNoSchedule
	}
	return Action{Kind: ActFenceMembers, Key: key, Effect: effect, ExpiresAt: q.ExpiresAt, Reason: reason, Actor: Actor}
}

// holdersToMove are the Pods on a quarantined unit that no migration has been started for: a Pod
// on a sibling form is learnt of after the decision, and it runs on the failing hardware too.
func (g unitView) holdersToMove() []PodRef {
	st := g.st
	if st.Quarantine == nil || st.State != Quarantined {
		return nil
	}
	var pods []PodRef
	switch {
	case st.rules.DetectorsNotHolders:
		// Any device's: a detector's fault names no Pod, and the watcher learns of the
		// device's holders after it sent the fault (its word is gone by then).
		pods = fenceOf(st).faultHolders()
	case st.Unit != nil:
		pods = fenceOf(st).migrationPods(Action{To: Quarantined})
	default:
		return nil
	}
	var out []PodRef
	for _, p := range pods {
		if !slices.Contains(st.Moving, p) {
			out = append(out, p)
		}
	}
	return out
}

// movingStarted records the Pods migrations were started for in this quarantine.
func (g unitView) movingStarted(pods []PodRef) {
	st := g.st
	st.Moving = append(st.Moving, pods...)
}

// unitUnknown: the workflow is a physical unit's (its device is a unit key) but has not heard
// which devices the unit is (no observation since it started): it cannot fence anything yet.
func (g unitView) unitUnknown() bool {
	st := g.st
	return st.Unit == nil && device.IsUnitKey(st.Device.Device)
}

// fencedDevices are the devices a fence covers: the device itself, or every form of its unit.
func (g unitView) fencedDevices() []device.ID {
	st := g.st
	if st.Unit == nil {
		return []device.ID{st.Device}
	}
	return st.Unit.DeviceIDs()
}

// unitView is a physical unit's forms, as the state knows them.
type unitView struct{ st *DeviceState }

func unitOf(st *DeviceState) unitView { return unitView{st} }
