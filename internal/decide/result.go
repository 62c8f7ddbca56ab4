package decide

import (
	"fmt"
	"time"
)

// Outcome is what became of an action the workflow carried out.
type Outcome string

const (
	// Done: the action was carried out. A taint's Rule and Effect, an inspection's Rule info, a
	// refresh's Effect and a check's Check say how.
	Done Outcome = "done"
	// Failed: the activity could not carry it out (Reason says why).
	Failed Outcome = "failed"
	// Held: the action could not be attempted now (the breaker unreachable, a unit's devices not
	// known yet); it is retried later.
	Held Outcome = "held"
	// Denied: the circuit breaker refused an automatic action.
	Denied Outcome = "denied"
	// Missing: a refresh found no rule to refresh.
	Missing Outcome = "missing"
	// Moving: migrations started for Pods (of the action's quarantine, or a unit's holders
	// learnt of afterwards).
	Moving Outcome = "moving"
)

// Result reports what became of one action. It is the one way the device workflow tells the
// decisions about the world: the workflow performs the actions Observe, Command, Tick, Woken
// and Report return, and reports each one's result here.
type Result struct {
	Action  Action
	Outcome Outcome
	// Reason says why an action failed, was held or was denied.
	Reason string
	// Rule is the name of the rule a taint wrote; Effect the effect a taint or a refresh left.
	Rule   string
	Effect string
	// Info is what an inspection found; Check a probe's or canary's outcome; Pods the Pods
	// migrations started for.
	Info  RuleInfo
	Check StepResult
	Pods  []PodRef
}

// Report takes the result of an action and returns the actions that follow from it.
func (st *DeviceState) Report(r Result, now time.Time) []Action {
	a := r.Action
	if r.Outcome == Moving {
		unitOf(st).movingStarted(r.Pods)
		return nil
	}
	switch a.Kind {
	case ActTaint:
		return st.taintResult(r, now)
	case ActInspectRule:
		if r.Outcome == Done {
			return fenceOf(st).ruleSeen(r.Info, now)
		}
	case ActRefreshRule:
		switch r.Outcome {
		case Missing:
			return fenceOf(st).ruleSeen(RuleInfo{Name: st.Device.TaintRuleName()}, now)
		case Failed:
			return reviewOf(st).ruleRefreshed(a, "", r.Reason, now)
		case Done:
			return reviewOf(st).ruleRefreshed(a, r.Effect, "", now)
		}
	case ActProbe, ActCanary:
		if r.Outcome == Done && r.Check.NotRun && st.rules.NotRunRetries {
			return reviewOf(st).checkNotRun(a.Kind, r.Check, now)
		}
		if r.Outcome == Done {
			return reviewOf(st).checkDone(a.Kind, r.Check, now)
		}
	case ActRepair:
		switch r.Outcome {
		case Done:
			return repairOf(st).repaired(r.Check, now)
		case Failed:
			return repairOf(st).repaired(StepResult{Reason: "the step could not run: " + r.Reason, At: now, NotRun: st.rules.NotRunRetries}, now)
		case Denied, Held:
			// The breaker refused (its reset budget is spent, or it is open) or could not be asked.
			repairOf(st).tryLater(r.Reason, now.Add(BreakerRetry), now)
		}
	case ActRelease:
		switch r.Outcome {
		case Done:
			return reviewOf(st).releaseDone(now)
		case Failed:
			return fenceOf(st).releaseFailed(r.Reason, now)
		}
	}
	return nil
}

// taintResult takes what became of a taint.
func (st *DeviceState) taintResult(r Result, now time.Time) []Action {
	a := r.Action
	switch r.Outcome {
	case Done:
		if st.State == Retired {
			// A taint decided before the retirement (an operator's force-quarantine sent as the
			// ladder gave up) finds the device retired: it stays so, and only a release with a
			// person's approval brings it back.
			st.transition(Retired, fmt.Sprintf("%s by %s came after the retirement: the device stays retired", a.To, a.Actor), a.Actor, now)
			return nil
		}
		if st.rules.ReleasePath && r.Effect != "" {
			a.Effect = r.Effect
		}
		fenceOf(st).applied(a, r.Rule, now)
		if a.Automatic {
			return repairOf(st).startLadder(now) // an operator's quarantine is theirs to end
		}
	case Held:
		fenceOf(st).hold(a, r.Reason, now)
	case Denied:
		fenceOf(st).denied(a, r.Reason, now)
	case Failed:
		if st.rules.ReleasePath {
			return fenceOf(st).taintFailed(a, r.Reason, now)
		}
		fenceOf(st).hold(a, "taint failed: "+r.Reason, now)
	}
	return nil
}
