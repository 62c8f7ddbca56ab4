package decide

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// fencing is the device's fence: the quarantine record a taint writes, the rule's effect and
// lease, an action the breaker holds back, and the record a release closes.
type fencing struct{ st *DeviceState }

func fenceOf(st *DeviceState) fencing { return fencing{st} }

// lease is how long a quarantine taken now lasts, on its record and on its rule: the policy's
// quarantine lease, or on the release path the review interval (which grows after failed reviews).
func (g fencing) lease() time.Duration {
	st := g.st
	if st.rules.ReleasePath {
		return g.interval()
	}
	return st.Policy.QuarantineLease.D()
}

// applied records a taint that the activity carried out.
func (g fencing) applied(a Action, rule string, now time.Time) {
	st := g.st
	st.Quarantine = &QuarantineRecord{RuleName: rule, Effect: a.Effect, Reason: a.Reason, Actor: a.Actor,
		CreatedAt: now, ExpiresAt: now.Add(g.lease()), State: a.To, Cause: a.Cause, Choice: a.Choice}
	st.ToleranceUntil, st.TaintFailures, st.Review = time.Time{}, 0, nil
	g.clearHeld()
	st.transition(a.To, a.Reason, a.Actor, now)
}

// hold records that the circuit breaker withheld an automatic action.
func (g fencing) hold(a Action, reason string, now time.Time) {
	st := g.st
	a.Woken = false
	st.Held, st.HeldReason, st.RetryAt = &a, reason, now.Add(BreakerRetry)
}

// denied records that the circuit breaker refused an automatic action. A breaker that wakes
// waiting devices is not asked again until it does (or the fallback passes).
func (g fencing) denied(a Action, reason string, now time.Time) {
	st := g.st
	g.hold(a, reason, now)
	if st.rules.BreakerWake {
		st.RetryAt = now.Add(BreakerFallback)
	}
}

func (g fencing) automatic(a Action) []Action {
	st := g.st
	if st.Paused {
		st.Held, st.HeldReason, st.RetryAt = &a, "automatic actions paused for this device", time.Time{}
		return nil
	}
	return []Action{a}
}

func (g fencing) clearHeld() {
	st := g.st
	st.Held, st.HeldReason, st.RetryAt = nil, "", time.Time{}
}

// inService reports a device that is in use as usual: healthy, or released after a quarantine.
func (g fencing) inService() bool {
	st := g.st
	return st.State == Healthy || st.State == Released
}

// effect is the taint effect to ask for. Runs on the release path leave dry run to the worker
// (read per decision); older runs froze it in their state.
func (g fencing) effect(e string) string {
	st := g.st
	if st.DryRun && !st.rules.ReleasePath {
		return policy.EffectNone
	}
	return e
}

func (g fencing) interval() time.Duration {
	st := g.st
	if st.ReviewInterval > 0 {
		return st.ReviewInterval.D()
	}
	return st.Policy.QuarantineLease.D()
}

// fenced reports a state in which the device's rule must be in force.
func (g fencing) fenced() bool {
	st := g.st
	return st.Quarantine != nil && (st.State == Quarantined || st.State == Restricted || st.State == Recovering || st.State == Retired)
}

// wantEffect is the effect the rule of a quarantine or restriction should carry.
func (g fencing) wantEffect(s State) string {
	st := g.st
	if s == Restricted {
		return policy.EffectNoSchedule
	}
	return g.effect(st.Policy.TaintEffect)
}

func (g fencing) closeRecord(by, reason string, now time.Time) {
	st := g.st
	q := *st.Quarantine
	q.ClosedAt, q.ClosedBy, q.CloseReason = now, by, reason
	st.Closed = append(st.Closed, q)
	if len(st.Closed) > maxClosed {
		// The oldest restriction goes first, so that retireAfter always sees its faults.
		drop := 0
		for i, c := range st.Closed {
			if st.rules.LadderTrust && !repairOf(st).forFault(c) {
				drop = i
				break
			}
		}
		st.Closed = append(st.Closed[:drop:drop], st.Closed[drop+1:]...)
	}
	st.Quarantine, st.Review, st.Moving = nil, nil, nil
}

// ruleSeen reconciles the workflow with the device's rule in the cluster: a rule someone else
// deleted or edited is an operator release, and the device follows it.
func (g fencing) ruleSeen(info RuleInfo, now time.Time) []Action {
	st := g.st
	if !g.fenced() {
		return nil
	}
	if !info.InForce() && st.rules.LadderTrust && st.Review != nil && st.Review.From == Retired {
		// A retired device under a person's release review: the review ends with a person's
		// approval or not at all. The device goes back to Retired and its rule is put back.
		reason := fmt.Sprintf("DeviceTaintRule %s of a retired device went missing during its release review (by %s): the review stopped and the device is fenced again; `device release` starts another",
			info.Name, cmp.Or(info.Actor, "unknown"))
		reviewOf(st).reviewEnded("stopped: rule missing")
		st.Review = nil
		st.transition(Retired, reason, Actor, now)
		return []Action{unitOf(st).fenceMembers(reason), {Kind: ActAlert, Level: LevelCritical, Reason: reason}}
	}
	if !info.InForce() && st.State == Retired {
		// A retired device is known broken: a rule removed by hand (or by a tool that prunes
		// what it did not create) is put back. Only `device release`, with an approval, ends it.
		reason := fmt.Sprintf("DeviceTaintRule %s of a retired device was removed (by %s): fenced again; `device release` brings it back after a review and an approval", info.Name, cmp.Or(info.Actor, "unknown"))
		return []Action{unitOf(st).fenceMembers(reason), {Kind: ActAlert, Level: LevelCritical, Reason: reason}}
	}
	if !info.InForce() {
		actor := info.Actor
		if actor == "" {
			actor = "unknown"
		}
		what := "deleted"
		switch {
		case info.Deleting:
			what = "being deleted"
		case info.Present:
			what = fmt.Sprintf("edited (taint key %q)", info.Key)
		}
		reason := fmt.Sprintf("DeviceTaintRule %s %s outside DeviceWarden: recorded as an operator release", info.Name, what)
		endStep := st.rules.LadderTrust && st.Policy.Repair.MovesHolders() && st.Quarantine.Ladder != nil
		g.closeRecord(actor, reason, now)
		st.transition(Released, reason, actor, now)
		acts := []Action{{Kind: ActAlert, Level: LevelWarning, Reason: reason}}
		if endStep {
			// Its node step may have fenced the node and holds its permit: nothing else lifts them.
			acts = append(acts, Action{Kind: ActEndNodeStep, Reason: reason, Actor: actor})
		}
		if st.Health != "" && st.Health.Severity() > 0 && len(st.Reporters) > 0 {
			acts = append(acts, st.evaluate(st.Health, now, "device still reported "+string(st.Health)+" after its rule was removed")...)
		}
		return acts
	}
	if len(info.Missing) > 0 {
		return []Action{unitOf(st).fenceMembers(fmt.Sprintf("rules missing for %s of unit %s", strings.Join(info.Missing, ", "), st.Unit.ID))}
	}
	if info.WantEffect != "" && info.Effect != info.WantEffect {
		return []Action{{Kind: ActRefreshRule, Key: info.Key, Effect: g.wantEffect(reviewOf(st).stateBeforeReview()), ExpiresAt: st.Quarantine.ExpiresAt,
			Reason: fmt.Sprintf("rule effect %s, want %s", info.Effect, info.WantEffect), Actor: Actor}}
	}
	return nil
}

// taintFailed holds a taint that the activity could not carry out; it alerts on the first failure
// and every tenth, so a taint that keeps failing is seen rather than retried silently.
func (g fencing) taintFailed(a Action, reason string, now time.Time) []Action {
	st := g.st
	g.hold(a, "taint failed: "+reason, now)
	st.TaintFailures++
	if st.TaintFailures == 1 || st.TaintFailures%10 == 0 {
		return []Action{{Kind: ActAlert, Level: LevelCritical, Reason: fmt.Sprintf("taint to %s failed %d time(s), retrying every %s: %s", a.To, st.TaintFailures, BreakerRetry, reason)}}
	}
	return nil
}

// releaseFailed keeps the device fenced when its rule could not be deleted.
func (g fencing) releaseFailed(reason string, now time.Time) []Action {
	st := g.st
	if st.Review == nil {
		return nil
	}
	return reviewOf(st).reviewFailed("release failed: "+reason, false, Actor, now)
}
