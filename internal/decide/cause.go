package decide

import (
	"fmt"
	"time"

	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// causing is the device's state as it concerns the causes of its faults (Rules.Causes).
type causing struct{ st *DeviceState }

func causeOf(st *DeviceState) causing { return causing{st} }

// observed keeps what the sources said of an Unhealthy report, and notes whether it repeats the
// standing fault: a Pod's status that changed for another reason, still Unhealthy for the same
// cause, is no new fault.
func (g causing) observed(obs Observation) {
	st := g.st
	if !st.rules.Causes {
		return
	}
	var c cause.Cause
	if obs.Cause != nil {
		c = *obs.Cause
	}
	st.repeat = st.Health == device.Unhealthy && obs.Health == device.Unhealthy && st.Cause != nil && *st.Cause == c
	if obs.Health == device.Unhealthy {
		st.Cause = &c
	}
}

// fault chooses the step a fault starts at and marks the taint with it. An application's fault
// is spared the fence: spared holds what the device does instead (an Event for the tenant),
// until the faults within the policy's window reach its limit.
func (g causing) fault(a Action, now time.Time) (taint Action, spared []Action, isSpared bool) {
	st := g.st
	if !st.rules.Causes {
		return a, nil, false
	}
	var c cause.Cause
	if st.Cause != nil {
		c = *st.Cause
	}
	ch := cause.ChooseFrom(c, st.Policy.Causes, catalogue(st))
	repeat := st.repeat
	st.repeat = false // it speaks of the observation being decided, never of a later decision
	if ch.First == policy.FirstNone {
		if repeat || (st.rules.History && st.StatusVersion != "" && st.StatusVersion == st.LastAppFault) {
			// The fault already counted stands, or its report came again (a new leader's
			// relist, a new run after the last ended): nothing new.
			return a, nil, true
		}
		if st.rules.History {
			st.LastAppFault = st.StatusVersion
		}
		t := st.Policy.Causes.AppFaultLimit()
		kept := st.AppFaults[:0]
		for _, at := range st.AppFaults {
			if at.After(now.Add(-t.Window.D())) {
				kept = append(kept, at)
			}
		}
		st.AppFaults, st.AppFaultsTotal = append(kept, now), st.AppFaultsTotal+1
		if n := len(st.AppFaults); n < t.Limit {
			reason := fmt.Sprintf("the application's own fault (%s; %s): the device stays in service (%d of %d within %s fence it)",
				c, ch.Why, n, t.Limit, t.Window.D())
			st.transition(st.State, reason, Actor, now)
			return a, []Action{{Kind: ActAppFault, Reason: reason, Actor: Actor}}, true
		}
		ch = cause.Choice{First: policy.FirstLadder, Why: fmt.Sprintf("%d application faults within %s (the last: %s): treated as the device's", len(st.AppFaults), t.Window.D(), c)}
		st.AppFaults = nil
	}
	a.Choice = &ch
	if c.Known() {
		a.Cause = &c
		a.Reason += "; cause: " + c.String()
	}
	if c.Known() || ch.First != policy.FirstLadder {
		a.Reason += fmt.Sprintf("; first step: %s (%s)", ch.First, ch.Why)
	}
	return a, nil, false
}

// firstStep is where a new quarantine's ladder starts: the first step of the kind its cause
// chose, or the first of all (an unknown cause, or a ladder without that kind of step).
func (g causing) firstStep(steps []policy.RepairStep) (int, string) {
	st := g.st
	q := st.Quarantine
	if !st.rules.Causes || q == nil || q.Choice == nil {
		return 0, ""
	}
	var kind policy.RepairKind
	switch q.Choice.First {
	case policy.FirstReset:
		kind = policy.RepairReset
	case policy.FirstNode:
		kind = policy.RepairNode
	default:
		return 0, ""
	}
	for i, s := range steps {
		if s.Kind == kind {
			return i, ""
		}
	}
	return 0, fmt.Sprintf("the cause chose a %s step, which the ladder has not: it climbs from its first step", kind)
}

// retiresAtOnce says whether the quarantine's cause asks for a replacement: no step can help.
func (g causing) retiresAtOnce() (string, bool) {
	st := g.st
	q := st.Quarantine
	if !st.rules.Causes || q == nil || q.Choice == nil || q.Choice.First != policy.FirstRetire {
		return "", false
	}
	what := "its cause"
	if q.Cause != nil {
		what = q.Cause.String()
	}
	return fmt.Sprintf("%s needs a replacement (%s): no repair step can help", what, q.Choice.Why), true
}

// retiresAfterTry says whether a failed try retires the device because its cause says so (a
// reset, then a replacement candidate: XID 64).
func (g causing) retiresAfterTry(l *Ladder) (string, bool) {
	st := g.st
	q := st.Quarantine
	if !st.rules.Causes || q == nil || q.Choice == nil || !q.Choice.ThenRetire || len(l.Tries) == 0 {
		return "", false
	}
	return fmt.Sprintf("its %s step did not bring it back, and its cause (%s) then needs a replacement", l.Tries[0].Kind, q.Choice.Why), true
}

// shown is the standing quarantine's cause and the step it chose, for search and the fleet page.
func (g causing) shown() string {
	q := g.st.Quarantine
	if q == nil || q.Choice == nil || g.st.State == Released || g.st.State == Healthy {
		return ""
	}
	what := "cause not said"
	switch {
	case q.Cause != nil:
		what = q.Cause.String()
	case q.Choice.First == policy.FirstLadder:
		return "" // no cause, and the ladder as ever: nothing to search by
	}
	return fmt.Sprintf("%s -> %s (%s)", what, q.Choice.First, q.Choice.Why)
}

// catalogue is the shipped table of causes the run decides by.
func catalogue(st *DeviceState) []policy.CauseRule {
	if st.rules.RemapsReset {
		return policy.Catalogue
	}
	return policy.CatalogueRetiringRemaps
}

// class is the quarantine's cause class and the first step its cause chose, for the time-to-repair
// metric: "unknown" and "ladder" when the quarantine has no cause or made no choice.
func (g causing) class() (string, string) {
	class, first := "unknown", string(policy.FirstLadder)
	if q := g.st.Quarantine; q != nil {
		if q.Cause != nil {
			class = q.Cause.Class()
		}
		if q.Choice != nil {
			first = string(q.Choice.First)
		}
	}
	return class, first
}
