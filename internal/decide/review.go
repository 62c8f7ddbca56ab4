package decide

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// Stage is where a recovery review stands.
type Stage string

// Review stages, in order: probe -> probation taint -> canary -> stability window -> approval -> release.
const (
	StageProbe     Stage = "Probe"
	StageProbation Stage = "Probation"
	StageCanary    Stage = "Canary"
	StageStability Stage = "Stability"
	StageApproval  Stage = "Approval"
	StageRelease   Stage = "Release"
)

// MaxReviewInterval caps the doubling of the review interval after failed reviews.
const MaxReviewInterval = 30 * 24 * time.Hour

// maxClosed bounds the closed quarantine records kept in state: as many as retireAfter may count.
const maxClosed = policy.MaxRetireAfter

// StepResult is the outcome of a probe or canary.
type StepResult struct {
	Passed bool      `json:"passed"`
	Reason string    `json:"reason"`
	Pod    string    `json:"pod,omitempty"`
	At     time.Time `json:"at"`
	// Busy: a repair step found the device still allocated to another claim and ran nothing.
	Busy bool `json:"busy,omitempty"`
	// BootID is the device's node's boot ID as a repair step saw it (a node step: after it), so
	// a later node step can tell that the node booted again since.
	BootID string `json:"bootID,omitempty"`
	// Holders are the Pods ("namespace/name") on the node that held devices when a node step
	// that moves them found it busy: the workflow moves them.
	Holders []string `json:"holders,omitempty"`
}

// Review is a quarantined or restricted device's way back: probe, probation with a canary, a
// stability window and, when the policy asks, a person's approval.
type Review struct {
	// From is the state the device returns to if the review fails.
	From      State     `json:"from"`
	Trigger   string    `json:"trigger"`
	Actor     string    `json:"actor"`
	StartedAt time.Time `json:"startedAt"`
	Stage     Stage     `json:"stage"`
	// ProbeSkipped is set for a restriction whose policy skips the probe; CanarySkipped (and
	// ProbeSkipped) for a restricted device still in use, whose own Pods report it Healthy.
	ProbeSkipped  bool        `json:"probeSkipped,omitempty"`
	CanarySkipped bool        `json:"canarySkipped,omitempty"`
	Probe         *StepResult `json:"probe,omitempty"`
	Canary        *StepResult `json:"canary,omitempty"`
	// Until ends the stability window (StageStability) or the wait for approval (StageApproval).
	Until      time.Time `json:"until,omitempty"`
	ApprovedBy string    `json:"approvedBy,omitempty"`
}

// ID names the review: when it started. A decision names the review it was made for.
func (r *Review) ID() string { return r.StartedAt.UTC().Format(time.RFC3339Nano) }

// RuleInfo is what InspectRule found of the device's DeviceTaintRule.
type RuleInfo struct {
	Name     string `json:"name"`
	Present  bool   `json:"present"`
	Deleting bool   `json:"deleting,omitempty"`
	Key      string `json:"key,omitempty"`
	Effect   string `json:"effect,omitempty"`
	// WantEffect is the effect the rule should have now (None while the worker runs with --dry-run).
	WantEffect string `json:"wantEffect,omitempty"`
	// Actor is the last writer named in the rule's managedFields ("" when unknown).
	Actor string `json:"actor,omitempty"`
	// Missing are the unit's devices that have no rule while others do (the fields above are
	// then of the rules that stand).
	Missing []string `json:"missing,omitempty"`
}

// InForce reports whether the rule still fences the device.
func (r RuleInfo) InForce() bool {
	return r.Present && !r.Deleting && (r.Key == TaintQuarantine || r.Key == TaintProbation)
}

func (st *DeviceState) interval() time.Duration {
	if st.ReviewInterval > 0 {
		return st.ReviewInterval.D()
	}
	return st.Policy.QuarantineLease.D()
}

// fenced reports a state in which the device's rule must be in force.
func (st *DeviceState) fenced() bool {
	return st.Quarantine != nil && (st.State == Quarantined || st.State == Restricted || st.State == Recovering || st.State == Retired)
}

// wantEffect is the effect the rule of a quarantine or restriction should carry.
func (st *DeviceState) wantEffect(s State) string {
	if s == Restricted {
		return policy.EffectNoSchedule
	}
	return st.effect(st.Policy.TaintEffect)
}

// startReview begins the way back for a quarantined or restricted device.
func (st *DeviceState) startReview(trigger, actor string, now time.Time) []Action {
	if st.Quarantine == nil || (st.State != Quarantined && st.State != Restricted && st.State != Retired) {
		return nil
	}
	st.askOvertaken()
	st.Quarantine.Reviews++
	r := &Review{From: st.State, Trigger: trigger, Actor: actor, StartedAt: now, Stage: StageProbe}
	st.Review = r
	st.transition(Recovering, "recovery review started: "+trigger, actor, now)
	// A failed probe outweighs any report: the device passes a probe before it goes back.
	probeFailed := st.rules.FailedProbeHolds && st.LastProbe != nil && !st.LastProbe.Passed
	if r.From == Restricted && st.spoken(st.Reporters) > 0 && !probeFailed {
		// Still in use: a probe or canary cannot get the device, and its own Pods' Healthy
		// reports are the evidence. Probation keeps new work off it through the window.
		r.ProbeSkipped, r.CanarySkipped = true, true
		return st.toProbation()
	}
	if r.From == Restricted && !st.Policy.ProbeRestricted && !probeFailed {
		r.ProbeSkipped = true
		return st.toProbation()
	}
	probe := st.Policy.Probe
	return []Action{{Kind: ActProbe, Check: &probe, Reason: trigger, Actor: actor}}
}

func (st *DeviceState) toProbation() []Action {
	st.Review.Stage = StageProbation
	return []Action{{Kind: ActRefreshRule, Key: TaintProbation, Effect: policy.EffectNoSchedule, ExpiresAt: st.Quarantine.ExpiresAt,
		Reason: "probation: only canaries may use the device", Actor: Actor}}
}

// checkDone takes the outcome of a probe or canary.
func (st *DeviceState) checkDone(kind ActionKind, res StepResult, now time.Time) []Action {
	r := st.Review
	if kind == ActProbe {
		st.LastProbe = &res
	}
	switch {
	case r == nil || st.State != Recovering:
		return nil // the review already ended (a report or a command came first)
	case kind == ActProbe && r.Stage == StageProbe:
		r.Probe = &res
		if !res.Passed {
			acts := st.reviewFailed("probe failed: "+res.Reason, true, Actor, now)
			return append(acts, st.stillBroken(now)...)
		}
		return st.toProbation()
	case kind == ActCanary && r.Stage == StageCanary:
		r.Canary = &res
		if !res.Passed {
			acts := st.reviewFailed("canary failed: "+res.Reason, true, Actor, now)
			return append(acts, st.stillBroken(now)...)
		}
		return st.startWindow(now)
	}
	return nil
}

// startWindow begins the stability window on probation (or ends it at once when it is zero).
func (st *DeviceState) startWindow(now time.Time) []Action {
	r := st.Review
	r.Stage, r.Until = StageStability, now.Add(st.Policy.StabilityWindow.D())
	if !r.Until.After(now) {
		return st.stabilityDone(now)
	}
	return nil
}

// ruleRefreshed takes the outcome of a refresh action. missing means the rule was not there.
func (st *DeviceState) ruleRefreshed(a Action, effect string, failure string, now time.Time) []Action {
	if failure != "" {
		if st.Review != nil && st.Review.Stage == StageProbation && a.Key == TaintProbation {
			return st.reviewFailed("probation taint not applied: "+failure, false, Actor, now)
		}
		return []Action{{Kind: ActAlert, Level: LevelWarning, Reason: "rule not updated: " + failure}}
	}
	if st.Quarantine != nil && effect != "" {
		st.Quarantine.Effect = effect
	}
	if st.Review != nil && st.Review.Stage == StageProbation && a.Key == TaintProbation {
		if st.Review.CanarySkipped {
			return st.startWindow(now)
		}
		st.Review.Stage = StageCanary
		canary := st.Policy.Canary
		return []Action{{Kind: ActCanary, Check: &canary, Reason: "canary on probation", Actor: Actor}}
	}
	return nil
}

func (st *DeviceState) stabilityDone(now time.Time) []Action {
	r := st.Review
	if st.Policy.ApprovalRequired || r.From == Retired {
		r.Stage, r.Until = StageApproval, now.Add(st.Policy.ApprovalTimeout.D())
		return []Action{{Kind: ActRequestApproval, Reason: st.reviewSummary(), Actor: Actor}}
	}
	r.Stage, r.Until = StageRelease, time.Time{}
	return []Action{{Kind: ActRelease, Reason: st.reviewSummary(), Actor: Actor}}
}

func (st *DeviceState) reviewSummary() string {
	r := st.Review
	s := "probe "
	switch {
	case r.CanarySkipped:
		s = "probe and canary skipped (still in use, its Pods report Healthy)"
	case r.ProbeSkipped:
		s += "skipped (restriction)"
	case r.Probe != nil:
		s += "passed (" + r.Probe.Reason + ")"
	}
	if r.Canary != nil {
		s += ", canary passed (" + r.Canary.Reason + ")"
	}
	return fmt.Sprintf("%s, stable on probation for %s", s, st.Policy.StabilityWindow.D())
}

// reviewFailed sends the device back to where it came from with a longer next interval.
func (st *DeviceState) reviewFailed(reason string, double bool, actor string, now time.Time) []Action {
	from := Quarantined
	if st.Review != nil {
		from = st.Review.From
	}
	st.reviewEnded(reason)
	if double {
		st.ReviewInterval = policy.JSONDuration(min(2*st.interval(), max(MaxReviewInterval, st.Policy.QuarantineLease.D())))
	}
	st.Review = nil
	if st.Quarantine == nil {
		st.transition(from, reason, actor, now)
		return nil
	}
	st.Quarantine.ExpiresAt = now.Add(st.interval())
	reason = fmt.Sprintf("%s; quarantine kept until %s", reason, st.Quarantine.ExpiresAt.UTC().Format(time.RFC3339))
	st.transition(from, reason, actor, now)
	return []Action{
		{Kind: ActRefreshRule, Key: TaintQuarantine, Effect: st.wantEffect(from), ExpiresAt: st.Quarantine.ExpiresAt, Reason: reason, Actor: actor},
		{Kind: ActAlert, Level: LevelWarning, Reason: reason},
	}
}

// releaseDone closes the quarantine after the rule was deleted.
func (st *DeviceState) releaseDone(now time.Time) []Action {
	r, q := st.Review, st.Quarantine
	if r == nil || q == nil {
		return nil
	}
	by := r.Actor
	if r.ApprovedBy != "" {
		by = r.ApprovedBy
	}
	reason := fmt.Sprintf("released after %s (%s)", st.reviewSummary(), r.Trigger)
	if l := q.Ladder; l != nil && len(l.Tries) > 0 && l.Tries[len(l.Tries)-1].Review == "" {
		l.Tries[len(l.Tries)-1].Review = "passed: released"
	}
	st.closeRecord(by, reason, now)
	st.ReviewInterval = 0
	st.transition(Released, reason, by, now)
	return []Action{{Kind: ActAlert, Level: LevelInfo, Reason: reason}}
}

// FirstReviewPassed reports whether the quarantine being released passed its first review: the
// device was probably never broken (it counts toward the false-quarantine rate).
func (st *DeviceState) FirstReviewPassed() bool {
	q := st.Quarantine
	return q != nil && q.Reviews == 1 && st.Review != nil && !st.Review.ProbeSkipped && (q.Ladder == nil || len(q.Ladder.Tries) == 0)
}

func (st *DeviceState) closeRecord(by, reason string, now time.Time) {
	q := *st.Quarantine
	q.ClosedAt, q.ClosedBy, q.CloseReason = now, by, reason
	st.Closed = append(st.Closed, q)
	if len(st.Closed) > maxClosed {
		// The oldest restriction goes first, so that retireAfter always sees its faults.
		drop := 0
		for i, c := range st.Closed {
			if st.rules.LadderTrust && !st.forFault(c) {
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
func (st *DeviceState) ruleSeen(info RuleInfo, now time.Time) []Action {
	if !st.fenced() {
		return nil
	}
	if !info.InForce() && st.rules.LadderTrust && st.Review != nil && st.Review.From == Retired {
		// A retired device under a person's release review: the review ends with a person's
		// approval or not at all. The device goes back to Retired and its rule is put back.
		reason := fmt.Sprintf("DeviceTaintRule %s of a retired device went missing during its release review (by %s): the review stopped and the device is fenced again; `device release` starts another",
			info.Name, cmp.Or(info.Actor, "unknown"))
		st.reviewEnded("stopped: rule missing")
		st.Review = nil
		st.transition(Retired, reason, Actor, now)
		return []Action{st.fenceMembers(reason), {Kind: ActAlert, Level: LevelCritical, Reason: reason}}
	}
	if !info.InForce() && st.State == Retired {
		// A retired device is known broken: a rule removed by hand (or by a tool that prunes
		// what it did not create) is put back. Only `device release`, with an approval, ends it.
		reason := fmt.Sprintf("DeviceTaintRule %s of a retired device was removed (by %s): fenced again; `device release` brings it back after a review and an approval", info.Name, cmp.Or(info.Actor, "unknown"))
		return []Action{st.fenceMembers(reason), {Kind: ActAlert, Level: LevelCritical, Reason: reason}}
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
		st.closeRecord(actor, reason, now)
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
		return []Action{st.fenceMembers(fmt.Sprintf("rules missing for %s of unit %s", strings.Join(info.Missing, ", "), st.Unit.ID))}
	}
	if info.WantEffect != "" && info.Effect != info.WantEffect {
		return []Action{{Kind: ActRefreshRule, Key: info.Key, Effect: st.wantEffect(st.stateBeforeReview()), ExpiresAt: st.Quarantine.ExpiresAt,
			Reason: fmt.Sprintf("rule effect %s, want %s", info.Effect, info.WantEffect), Actor: Actor}}
	}
	return nil
}

func (st *DeviceState) stateBeforeReview() State {
	if st.Review != nil {
		return st.Review.From
	}
	return st.State
}

// taintFailed holds a taint that the activity could not carry out; it alerts on the first failure
// and every tenth, so a taint that keeps failing is seen rather than retried silently.
func (st *DeviceState) taintFailed(a Action, reason string, now time.Time) []Action {
	st.hold(a, "taint failed: "+reason, now)
	st.TaintFailures++
	if st.TaintFailures == 1 || st.TaintFailures%10 == 0 {
		return []Action{{Kind: ActAlert, Level: LevelCritical, Reason: fmt.Sprintf("taint to %s failed %d time(s), retrying every %s: %s", a.To, st.TaintFailures, BreakerRetry, reason)}}
	}
	return nil
}

// releaseFailed keeps the device fenced when its rule could not be deleted.
func (st *DeviceState) releaseFailed(reason string, now time.Time) []Action {
	if st.Review == nil {
		return nil
	}
	return st.reviewFailed("release failed: "+reason, false, Actor, now)
}

// spoken counts the reporters whose word is evidence about the device: all of them, but for a
// shared unit's silent holders (Reporter.Silent) in runs that know them (SilentNoEvidence).
func (st *DeviceState) spoken(reps []Reporter) int {
	n := 0
	for _, r := range reps {
		if !r.Silent || !st.rules.SilentNoEvidence {
			n++
		}
	}
	return n
}

// evidence says whether a Healthy observation with these reporters is a word about the device: not
// when every reporter is a silent holder (runs with SilentNoEvidence; none is no reporter at all).
func (st *DeviceState) evidence(reps []Reporter) bool {
	return !st.rules.SilentNoEvidence || len(reps) == 0 || st.spoken(reps) > 0
}
