package decide

import (
	"fmt"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// MaxReviewInterval caps the doubling of the review interval after failed reviews.
const MaxReviewInterval = 30 * 24 * time.Hour

// maxClosed bounds the closed quarantine records kept in state: as many as retireAfter may count.
const maxClosed = policy.MaxRetireAfter

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
	// After is the repair step the review follows ("" for none): its probe is the policy's
	// probe for that path (policy.ProbeFor).
	After policy.RepairKind `json:"after,omitempty"`
	// Until ends the stability window (StageStability), the wait for the sources (StageSources)
	// or the wait for approval (StageApproval).
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

// startReview begins the way back for a quarantined or restricted device.
func (g reviewing) startReview(trigger, actor string, now time.Time) []Action {
	st := g.st
	if st.Quarantine == nil || (st.State != Quarantined && st.State != Restricted && st.State != Retired) {
		return nil
	}
	repairOf(st).askOvertaken()
	st.Quarantine.Reviews++
	r := &Review{From: st.State, Trigger: trigger, Actor: actor, StartedAt: now, Stage: StageProbe}
	if repairOf(st).laddered() {
		r.After = st.Quarantine.Ladder.justRan()
	}
	st.Review = r
	st.transition(Recovering, "recovery review started: "+trigger, actor, now)
	// A failed probe outweighs any report: the device passes a probe before it goes back.
	probeFailed := st.rules.FailedProbeHolds && st.LastProbe != nil && !st.LastProbe.Passed
	if r.From == Restricted && g.spoken(st.Reporters) > 0 && !probeFailed {
		// Still in use: a probe or canary cannot get the device, and its own Pods' Healthy
		// reports are the evidence. Probation keeps new work off it through the window.
		r.ProbeSkipped, r.CanarySkipped = true, true
		return g.toProbation()
	}
	if r.From == Restricted && !st.Policy.ProbeRestricted && !probeFailed {
		r.ProbeSkipped = true
		return g.toProbation()
	}
	probe := st.Policy.ProbeFor(r.After)
	return []Action{{Kind: ActProbe, Check: &probe, Reason: trigger, Actor: actor}}
}

func (g reviewing) toProbation() []Action {
	st := g.st
	st.Review.Stage = StageProbation
	return []Action{{Kind: ActRefreshRule, Key: TaintProbation, Effect: policy.EffectNoSchedule, ExpiresAt: st.Quarantine.ExpiresAt,
		Reason: "probation: only canaries may use the device", Actor: Actor}}
}

// checkNotRun takes a probe or canary that did not run (Rules.NotRunRetries): no verdict on the
// device, so the review waits at its stage and the check is taken again later.
func (g reviewing) checkNotRun(kind ActionKind, res StepResult, now time.Time) []Action {
	st := g.st
	r := st.Review
	if r == nil || st.State != Recovering || (kind == ActProbe) != (r.Stage == StageProbe) || (kind == ActCanary) != (r.Stage == StageCanary) {
		return nil // the review already ended or went on
	}
	_, acts := notRunOf(st).wait(kind, r.ID(), res, now)
	return acts
}

// checkDone takes the outcome of a probe or canary.
func (g reviewing) checkDone(kind ActionKind, res StepResult, now time.Time) []Action {
	st := g.st
	r := st.Review
	notRunOf(st).ran(kind)
	if kind == ActProbe {
		st.LastProbe = &res
	}
	switch {
	case r == nil || st.State != Recovering:
		return nil // the review already ended (a report or a command came first)
	case kind == ActProbe && r.Stage == StageProbe:
		r.Probe = &res
		if !res.Passed {
			acts := g.reviewFailed("probe failed: "+res.Reason, true, Actor, now)
			return append(acts, repairOf(st).stillBroken(now)...)
		}
		return g.toProbation()
	case kind == ActCanary && r.Stage == StageCanary:
		r.Canary = &res
		if !res.Passed {
			acts := g.reviewFailed("canary failed: "+res.Reason, true, Actor, now)
			return append(acts, repairOf(st).stillBroken(now)...)
		}
		return g.startWindow(now)
	}
	return nil
}

// startWindow begins the stability window on probation (or ends it at once when it is zero).
func (g reviewing) startWindow(now time.Time) []Action {
	st := g.st
	r := st.Review
	r.Stage, r.Until = StageStability, now.Add(st.Policy.StabilityWindow.D())
	if !r.Until.After(now) {
		return g.stabilityDone(now)
	}
	return nil
}

// ruleRefreshed takes the outcome of a refresh action. missing means the rule was not there.
func (g reviewing) ruleRefreshed(a Action, effect string, failure string, now time.Time) []Action {
	st := g.st
	if failure != "" {
		if st.Review != nil && st.Review.Stage == StageProbation && a.Key == TaintProbation {
			return g.reviewFailed("probation taint not applied: "+failure, false, Actor, now)
		}
		return []Action{{Kind: ActAlert, Level: LevelWarning, Reason: "rule not updated: " + failure}}
	}
	if st.Quarantine != nil && effect != "" {
		st.Quarantine.Effect = effect
	}
	if st.Review != nil && st.Review.Stage == StageProbation && a.Key == TaintProbation {
		if st.Review.CanarySkipped {
			return g.startWindow(now)
		}
		st.Review.Stage = StageCanary
		canary := st.Policy.Canary
		return []Action{{Kind: ActCanary, Check: &canary, Reason: "canary on probation", Actor: Actor}}
	}
	return nil
}

func (g reviewing) stabilityDone(now time.Time) []Action {
	st := g.st
	r := st.Review
	if acts, waiting := g.awaitSources(now); waiting {
		return acts
	}
	if st.Policy.ApprovalRequired || r.From == Retired {
		r.Stage, r.Until = StageApproval, now.Add(st.Policy.ApprovalTimeout.D())
		return []Action{{Kind: ActRequestApproval, Reason: g.reviewSummary(), Actor: Actor}}
	}
	r.Stage, r.Until = StageRelease, time.Time{}
	return []Action{{Kind: ActRelease, Reason: g.reviewSummary(), Actor: Actor}}
}

func (g reviewing) reviewSummary() string {
	st := g.st
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
func (g reviewing) reviewFailed(reason string, double bool, actor string, now time.Time) []Action {
	st := g.st
	from := Quarantined
	if st.Review != nil {
		from = st.Review.From
	}
	g.reviewEnded(reason)
	if double {
		st.ReviewInterval = policy.JSONDuration(min(2*fenceOf(st).interval(), max(MaxReviewInterval, st.Policy.QuarantineLease.D())))
	}
	st.Review = nil
	if st.Quarantine == nil {
		st.transition(from, reason, actor, now)
		return nil
	}
	st.Quarantine.ExpiresAt = now.Add(fenceOf(st).interval())
	reason = fmt.Sprintf("%s; quarantine kept until %s", reason, st.Quarantine.ExpiresAt.UTC().Format(time.RFC3339))
	st.transition(from, reason, actor, now)
	return []Action{
		{Kind: ActRefreshRule, Key: TaintQuarantine, Effect: fenceOf(st).wantEffect(from), ExpiresAt: st.Quarantine.ExpiresAt, Reason: reason, Actor: actor},
		{Kind: ActAlert, Level: LevelWarning, Reason: reason},
	}
}

// releaseDone closes the quarantine after the rule was deleted.
func (g reviewing) releaseDone(now time.Time) []Action {
	st := g.st
	r, q := st.Review, st.Quarantine
	if r == nil || q == nil {
		return nil
	}
	by := r.Actor
	if r.ApprovedBy != "" {
		by = r.ApprovedBy
	}
	reason := fmt.Sprintf("released after %s (%s)", g.reviewSummary(), r.Trigger)
	if l := q.Ladder; l != nil && len(l.Tries) > 0 && l.Tries[len(l.Tries)-1].Review == "" {
		l.Tries[len(l.Tries)-1].Review = "passed: released"
	}
	fenceOf(st).closeRecord(by, reason, now)
	st.ReviewInterval = 0
	st.transition(Released, reason, by, now)
	return []Action{{Kind: ActAlert, Level: LevelInfo, Reason: reason}}
}

// firstReviewPassed reports whether the quarantine being released passed its first review: the
// device was probably never broken (it counts toward the false-quarantine rate).
func (g reviewing) firstReviewPassed() bool {
	st := g.st
	q := st.Quarantine
	return q != nil && q.Reviews == 1 && st.Review != nil && !st.Review.ProbeSkipped && (q.Ladder == nil || len(q.Ladder.Tries) == 0)
}

func (g reviewing) stateBeforeReview() State {
	st := g.st
	if st.Review != nil {
		return st.Review.From
	}
	return st.State
}

// spoken counts the reporters whose word is evidence about the device: all of them, but for a
// shared unit's silent holders (Reporter.Silent) in runs that know them (SilentNoEvidence).
func (g reviewing) spoken(reps []Reporter) int {
	st := g.st
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
func (g reviewing) evidence(reps []Reporter) bool {
	st := g.st
	return !st.rules.SilentNoEvidence || len(reps) == 0 || g.spoken(reps) > 0
}

// reviewing is the device's way back: the recovery review's stages, from the probe to the
// release, and what ends it.
type reviewing struct{ st *DeviceState }

func reviewOf(st *DeviceState) reviewing { return reviewing{st} }
