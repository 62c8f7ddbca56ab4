package decide

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Actor is recorded on decisions DeviceWarden makes by itself.
const Actor = devicemsg.Actor

// StaleLate is how late a staleness deadline must be taken up for the workflow to conclude that it
// was itself away (Temporal down, no worker): its timer fires when it comes back, before the
// watcher's retried heartbeats (at most 30 s apart) could arrive.
const StaleLate = time.Minute

// StaleGrace is how long such a late deadline waits for a heartbeat before the Healthy report
// counts as stale: the watcher's default heartbeat interval.
const StaleGrace = 2 * time.Minute

// BreakerFallback is how long a device the breaker denied waits before asking again when the
// breaker wakes waiting devices itself (on resume): a safety net, not a poll.
const BreakerFallback = 10 * time.Minute

// BreakerRetry is how long an action the circuit breaker withheld waits before asking again.
const BreakerRetry = 30 * time.Second

// maxTransitions bounds the audit trail kept in state; Temporal's history keeps every event.
const maxTransitions = 100

// NewState is the state of a device that has just been seen.
func NewState(id device.ID, node string, p policy.Policy, dryRun bool) *DeviceState {
	return &DeviceState{Device: id, Node: node, Policy: p, DryRun: dryRun, State: Healthy, Health: device.Healthy}
}

// Observe takes a report from the watcher and returns what to do. A unit that grew while fenced
// has its new devices fenced first.
func (st *DeviceState) Observe(obs Observation, now time.Time) []Action {
	grew := unitOf(st).joinUnit(obs.Unit)
	acts := st.observe(obs, now)
	if len(grew) > 0 && fenceOf(st).fenced() {
		acts = append([]Action{unitOf(st).fenceMembers(strings.Join(grew, ", ") + " joined unit " + st.Unit.ID.String())}, acts...)
	}
	return acts
}

func (st *DeviceState) observe(obs Observation, now time.Time) []Action {
	if !st.newer(obs) {
		st.Ignored++
		if obs.StatusVersion == st.StatusVersion && obs.Health == st.Health && obs.Message == st.Message {
			// A heartbeat: the same report is still current.
			st.LastHeard, st.StaleGraceUntil = now, time.Time{}
			if st.Stale {
				st.Stale = false
				return st.evaluate(obs.Health, now, "fresh report after staleness")
			}
			if st.rules.ReleasePath && st.Quarantine != nil && (st.State == Quarantined || st.State == Restricted || st.State == Retired) {
				// Every heartbeat re-reads the fence: a rule removed by hand, or a dry run switched
				// off, is seen within one heartbeat interval.
				return []Action{{Kind: ActInspectRule, Effect: fenceOf(st).wantEffect(st.State), Reason: "heartbeat"}}
			}
		}
		return nil
	}
	if st.rules.TakenWords && wordsTaken(st, obs) {
		// A new leader re-sends a detector's word its predecessor delivered: no new fault.
		st.Ignored++
		return nil
	}
	takeWords(st, obs.Words)
	causeOf(st).observed(obs)
	st.Health, st.Message, st.StatusVersion, st.ObservedAt, st.Reporters = obs.Health, obs.Message, obs.StatusVersion, obs.ObservedAt, obs.Reporters
	if obs.Seq != nil {
		st.Seq = obs.Seq
	}
	st.LastHeard, st.Stale, st.StaleGraceUntil = now, false, time.Time{}
	if obs.Node != "" {
		st.Node = obs.Node
	}
	if obs.DeviceClass != "" {
		st.DeviceClass = obs.DeviceClass
	}
	if !st.rules.KeepsStanding || !obs.StandingUnread {
		st.Standing = obs.Standing
	}
	if acts, done := reviewOf(st).sourcesCleared(now); done {
		return acts
	}
	if len(obs.Reporters) == 0 && st.rules.ReleasePath && obs.Source.FromDriver() {
		// The driver vouches for a device no pod holds (it took its own taint off).
		if acts, done := st.observeFenced(obs, "driver reports the device healthy ("+string(obs.Source)+")", now); done {
			return acts
		}
	}
	if len(obs.Reporters) == 0 {
		// No pod holds the device: there is nothing to suspect, and nothing to judge staleness by.
		// A quarantine on a repair ladder may now take its next step.
		if acts := repairOf(st).climb(now); acts != nil {
			return acts
		}
		if st.State == Suspect {
			st.transition(Healthy, "no pod holds the device any more", Actor, now)
			st.ToleranceUntil = time.Time{}
		}
		return nil
	}
	if !held(st, obs.Reporters) {
		// Only detectors speak of the device (its driver's taint, a report): no job to wait for.
		if acts := repairOf(st).climb(now); acts != nil {
			return acts
		}
	}
	reason := "device reported " + string(obs.Health)
	if obs.Message != "" {
		reason += ": " + obs.Message
	}
	if st.rules.ReleasePath {
		if acts, done := st.observeFenced(obs, reason, now); done {
			return acts
		}
	}
	return st.evaluate(obs.Health, now, reason)
}

// observeFenced handles a report about a device that is quarantined, restricted or under review;
// done is false when the usual evaluation applies.
func (st *DeviceState) observeFenced(obs Observation, reason string, now time.Time) ([]Action, bool) {
	switch {
	case st.State == Retired:
		// Retired stays fenced whatever is reported; only a person brings it back.
		return []Action{{Kind: ActInspectRule, Effect: fenceOf(st).wantEffect(Retired), Reason: reason}}, true
	case st.State == Recovering && obs.Health != device.Healthy && reviewOf(st).duringStep(obs):
		return nil, true
	case st.State == Recovering && obs.Health != device.Healthy:
		acts := reviewOf(st).reviewFailed(reason+" during the recovery review", true, Actor, now)
		return append(acts, repairOf(st).stillBroken(now)...), true
	case st.State == Quarantined && obs.Health == device.Unhealthy:
		// Still failed: make sure the fence is still there (someone may have removed it).
		return []Action{{Kind: ActInspectRule, Effect: fenceOf(st).wantEffect(Quarantined), Reason: reason}}, true
	case st.State == Quarantined && obs.Health == device.Healthy && obs.Source.FromDriver() && !st.Paused:
		return reviewOf(st).startReview("driver reports the device healthy ("+string(obs.Source)+")", Actor, now), true
	case st.State == Restricted && obs.Health == device.Healthy && !st.Paused && reviewOf(st).evidence(obs.Reporters):
		return reviewOf(st).startReview("reported Healthy again by the Pods using it", Actor, now), true
	case st.State == Restricted && obs.Health == device.Healthy && !st.Paused:
		return nil, true // only silent holders: no Pod said the device works
	}
	return nil, false
}

// duringStep reports (under StepReports) whether obs was observed before the review that follows
// a passed repair step began: it tells of the device during the step, not after it.
func (g reviewing) duringStep(obs Observation) bool {
	st := g.st
	r := st.Review
	return st.rules.StepReports && r != nil && !obs.ObservedAt.IsZero() && obs.ObservedAt.Before(r.StartedAt) && repairOf(st).repairedBy() != ""
}

func (st *DeviceState) evaluate(h device.Health, now time.Time, reason string) []Action {
	switch h {
	case device.Unhealthy:
		if st.State == Quarantined || st.State == Retired || (st.Held != nil && st.Held.To == Quarantined) {
			return nil
		}
		a, spared, ok := causeOf(st).fault(Action{Kind: ActTaint, To: Quarantined, Effect: fenceOf(st).effect(st.Policy.TaintEffect), Reason: reason, Actor: Actor, Automatic: true}, now)
		if ok {
			return spared
		}
		acts := fenceOf(st).automatic(a)
		return append(acts, Action{Kind: ActAlert, Level: LevelCritical, Reason: a.Reason})
	case device.Unknown:
		if !fenceOf(st).inService() {
			return nil
		}
		st.UnknownEpisodes++
		window := st.Policy.ToleranceWindow.D()
		for i := 1; i < st.UnknownEpisodes && window < st.Policy.BackoffCap.D(); i++ {
			window *= 2
		}
		window = min(window, st.Policy.BackoffCap.D())
		st.ToleranceUntil = now.Add(window)
		st.transition(Suspect, fmt.Sprintf("%s; tolerating for %s (episode %d)", reason, window, st.UnknownEpisodes), Actor, now)
		return []Action{{Kind: ActAlert, Level: LevelWarning, Gather: true,
			Reason: fmt.Sprintf("%s; new allocations restricted at %s unless it reports Healthy", reason, st.ToleranceUntil.UTC().Format(time.RFC3339))}}
	default: // Healthy
		if st.Held != nil && st.Held.To == Restricted {
			fenceOf(st).clearHeld()
		}
		if st.State == Suspect {
			st.ToleranceUntil = time.Time{}
			st.transition(Healthy, "Healthy inside the tolerance window", Actor, now)
			return []Action{{Kind: ActAlert, Level: LevelInfo, Reason: "device reported Healthy again before the tolerance window ended", Gather: true}}
		}
		return nil
	}
}

// Tick is called when NextDeadline passes.
func (st *DeviceState) Tick(now time.Time) []Action {
	var acts []Action
	if s := st.staleAt(); !s.IsZero() && !now.Before(s) && st.rules.StaleGraceOn && st.StaleGraceUntil.IsZero() && now.Sub(s) > StaleLate {
		// The deadline is taken up late: this workflow was away, and so were the watcher's
		// heartbeats. Give them one interval to arrive before calling a Healthy device stale.
		st.StaleGraceUntil = now.Add(StaleGrace)
	} else if s := st.staleAt(); !s.IsZero() && !now.Before(s) {
		st.Stale, st.StaleGraceUntil = true, time.Time{}
		age := now.Sub(st.LastHeard).Round(time.Second)
		st.Health, st.Message = device.Unknown, fmt.Sprintf("no report for %s: a stale Healthy is not proof", age)
		acts = append(acts, st.evaluate(device.Unknown, now, "Healthy report went stale ("+age.String()+" old)")...)
	}
	if st.State == Suspect && !st.Paused && !st.ToleranceUntil.IsZero() && !now.Before(st.ToleranceUntil) && (st.Held == nil) {
		reason := fmt.Sprintf("Unknown for the whole tolerance window (until %s) without a Healthy report", st.ToleranceUntil.UTC().Format(time.RFC3339))
		acts = append(acts, fenceOf(st).automatic(Action{Kind: ActTaint, To: Restricted, Effect: fenceOf(st).effect(policy.EffectNoSchedule), Reason: reason, Actor: Actor, Automatic: true})...)
	}
	if st.Held != nil && !st.Paused && !st.RetryAt.IsZero() && !now.Before(st.RetryAt) {
		a := *st.Held
		fenceOf(st).clearHeld()
		acts = append(acts, a)
	}
	if r := st.Review; r != nil && st.State == Recovering && !r.Until.IsZero() && !now.Before(r.Until) {
		switch r.Stage {
		case StageStability:
			acts = append(acts, reviewOf(st).stabilityDone(now)...)
		case StageApproval:
			acts = append(acts, reviewOf(st).reviewFailed(fmt.Sprintf("no approval within %s", st.Policy.ApprovalTimeout.D()), false, Actor, now)...)
		case StageSources:
			acts = append(acts, reviewOf(st).sourcesFailed(now)...)
		}
	}
	acts = append(acts, notRunOf(st).checkDue(now)...)
	if l := repairOf(st).ladderRetry(); !l.IsZero() && !now.Before(l) {
		st.Quarantine.Ladder.RetryAt = time.Time{}
		acts = append(acts, repairOf(st).climb(now)...)
	}
	if d := repairOf(st).stepApprovalDue(); !d.IsZero() && !now.Before(d) {
		acts = append(acts, repairOf(st).stopForApproval(fmt.Sprintf("had no approval within %s", st.Policy.ApprovalTimeout.D()), Actor, now)...)
	}
	if q := st.Quarantine; q != nil && (st.State == Quarantined || st.State == Restricted) && !now.Before(q.ExpiresAt) {
		// A restriction whose Pods are gone gets the same review; one still in use recovers when
		// its Pods report Healthy again.
		repairing := repairOf(st).laddered() && st.Quarantine.Ladder.Running
		if st.rules.ReleasePath && !st.Paused && !repairing && (st.State == Quarantined || len(st.Reporters) == 0) {
			return append(acts, reviewOf(st).startReview("quarantine lease ended", Actor, now)...)
		}
		// Never a silent release: the lease is renewed and the expiry is audited and alerted.
		q.ExpiresAt = now.Add(st.Policy.QuarantineLease.D())
		reason := fmt.Sprintf("quarantine lease expired; re-evaluated with last report %s; kept until %s", st.Health, q.ExpiresAt.UTC().Format(time.RFC3339))
		st.transition(st.State, reason, Actor, now)
		acts = append(acts, Action{Kind: ActAlert, Level: LevelWarning, Reason: reason})
		if st.rules.ReleasePath {
			acts = append(acts, Action{Kind: ActRefreshRule, Key: TaintQuarantine, Effect: fenceOf(st).wantEffect(st.State), ExpiresAt: q.ExpiresAt, Reason: reason, Actor: Actor})
		}
	}
	return acts
}

// Woken is the breaker's word that it may grant again: a held action is retried now.
func (st *DeviceState) Woken(now time.Time) []Action {
	if l := repairOf(st).ladderRetry(); st.rules.ResetWake && !l.IsZero() && now.Before(l) {
		st.Quarantine.Ladder.RetryAt = now // a reset ended: the try asks the breaker again now
		acts := st.Tick(now)
		for i := range acts {
			if acts[i].Kind == ActRepair {
				acts[i].Woken = true // asked of the breaker itself, past a worker's memory of its refusal
			}
		}
		return acts
	}
	if st.Held == nil || st.Paused || st.RetryAt.IsZero() {
		return nil
	}
	st.RetryAt = now
	st.Held.Woken = true
	return st.Tick(now)
}

// NextDeadline is the earliest time Tick must run; zero means none.
func (st *DeviceState) NextDeadline() time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	consider(st.staleAt())
	if !st.Paused {
		if st.State == Suspect && st.Held == nil {
			consider(st.ToleranceUntil)
		}
		if st.Held != nil {
			consider(st.RetryAt)
		}
	}
	if st.Quarantine != nil && (st.State == Quarantined || st.State == Restricted) {
		consider(st.Quarantine.ExpiresAt)
	}
	if st.Review != nil && st.State == Recovering {
		consider(st.Review.Until)
	}
	consider(repairOf(st).ladderRetry())
	consider(repairOf(st).stepApprovalDue())
	consider(notRunOf(st).checkAt())
	return next
}

// Idle reports a Healthy device that no pod holds and that waits for nothing: its workflow may end.
func (st *DeviceState) Idle() bool {
	return fenceOf(st).inService() && len(st.Reporters) == 0 && st.Held == nil && !st.Paused
}

// staleAt is when the current Healthy report goes stale; zero when staleness does not apply.
func (st *DeviceState) staleAt() time.Time {
	if st.Health != device.Healthy || st.Stale || len(st.Reporters) == 0 || st.LastHeard.IsZero() || !fenceOf(st).inService() {
		return time.Time{}
	}
	at := st.LastHeard.Add(st.Policy.HeartbeatLimit.D())
	if st.StaleGraceUntil.After(at) {
		return st.StaleGraceUntil
	}
	return at
}

func (st *DeviceState) transition(to State, reason, actor string, now time.Time) {
	st.Transitions = append(st.Transitions, Transition{From: st.State, To: to, Reason: reason, Actor: actor, At: now})
	if len(st.Transitions) > maxTransitions {
		st.Transitions = st.Transitions[len(st.Transitions)-maxTransitions:]
	}
	st.State = to
}

// newer reports whether obs is newer than the current report: by the watcher's sequence when both
// carry one; for observations from before it, pod resourceVersions compared as numbers when both
// are numeric, otherwise the observation time.
func (st *DeviceState) newer(obs Observation) bool {
	if obs.Seq != nil && st.Seq != nil {
		// The watcher's own order: a new leader's reports are never taken for old ones.
		return st.Seq.Before(*obs.Seq)
	}
	if st.StatusVersion == "" {
		return true
	}
	if obs.StatusVersion == st.StatusVersion {
		// The same pod status with different content can only be something the watcher derived
		// (a node outage, a device gone from its ResourceSlice): order it by observation time.
		return (obs.Health != st.Health || obs.Message != st.Message) && obs.ObservedAt.After(st.ObservedAt)
	}
	nv, err1 := strconv.ParseUint(obs.StatusVersion, 10, 64)
	ov, err2 := strconv.ParseUint(st.StatusVersion, 10, 64)
	if err1 == nil && err2 == nil {
		return nv > ov
	}
	return obs.ObservedAt.After(st.ObservedAt)
}
