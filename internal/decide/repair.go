package decide

import (
	"fmt"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// A policy's repair ladder (policy.Repair) tries to bring a quarantined device back before its
// review would: once the device is idle (no Pod holds it), each step runs, then the usual review
// (probe, canary, window, approval). A review that passes releases the device; a step or review
// that fails goes to the next attempt, then the next step; after the last one the device is
// Retired: fenced for good, never reviewed again, released only with a person's approval.

// ActRepair runs one step of the ladder on the device; the result goes to Report as a Check.
const ActRepair ActionKind = "repair"

// ActRetire writes a retired device's evidence (every fault, step and probe, with times).
const ActRetire ActionKind = "retire"

// Ladder is where a quarantine stands on its policy's repair ladder.
type Ladder struct {
	// Step indexes Policy.Repair.Steps; Attempt counts that step's tries, from 1.
	Step    int `json:"step"`
	Attempt int `json:"attempt"`
	// Running: a step is out and its result not yet reported.
	Running bool `json:"running,omitempty"`
	// Due: the next try is to be taken once the device is idle. Set when the ladder starts and
	// when a try fails (the step, or the review after it, found the device still broken); a
	// review that ends otherwise (no approval, a person's rejection or force-quarantine) stops
	// the ladder, and the quarantine waits for its review as it would without one.
	Due bool `json:"due,omitempty"`
	// Tries are every step tried for this quarantine, with the review that followed.
	Tries []RepairTry `json:"tries,omitempty"`
	// From is the step the ladder started at: its cause skipped the steps before it.
	From int `json:"from,omitempty"`
	// SourcesSkipped are the steps the ladder passed over, never tried, when its sources asked
	// for a node step (Rules.SourceVerdict).
	SourcesSkipped []policy.RepairKind `json:"sourcesSkipped,omitempty"`
	// RetryAt is when a try that found the device still held looks again.
	RetryAt time.Time `json:"retryAt,omitempty"`
	// Awaiting: the next try's step needs a person's approval (its policy says so), asked for
	// until ApprovalUntil. ApprovedTry is the try (its number, from 1) a person approved, and
	// ApprovedBy who.
	Awaiting      bool      `json:"awaiting,omitempty"`
	ApprovalUntil time.Time `json:"approvalUntil,omitempty"`
	ApprovedTry   int       `json:"approvedTry,omitempty"`
	ApprovedBy    string    `json:"approvedBy,omitempty"`
	// Ask is the ID the waiting step's approval must carry (under LadderTrust): the quarantine,
	// step and try, repair-<try>-<step>-<quarantine start>. Empty in runs before it, whose ID
	// is repair-<try>.
	Ask string `json:"ask,omitempty"`
	// Asks counts the approvals asked for in this quarantine (Rules.FreshAsks): an ask repeated
	// for the same try (the first refused or timed out) gets an ID of its own, so a button of the
	// first approves nothing in the second.
	Asks int `json:"asks,omitempty"`
}

// RepairRetry is how long a try that found the device still allocated waits before it looks
// again, in case no report says the holder left.
const RepairRetry = time.Minute

// MoveRetry is how long a node step that is moving the node's other holders waits before it
// looks again: the migrations it started end within seconds to minutes.
const MoveRetry = 15 * time.Second

// RepairTry is one attempt at one step, and what the review after it found.
type RepairTry struct {
	Kind    policy.RepairKind `json:"kind"`
	Attempt int               `json:"attempt"`
	At      time.Time         `json:"at"`
	Result  *StepResult       `json:"result,omitempty"`
	// Review is how the review after a successful step ended ("" while it runs).
	Review string `json:"review,omitempty"`
}

// laddered says whether this quarantine climbs a ladder.
func (g repairing) laddered() bool {
	st := g.st
	return st.rules.Repair && st.Policy.Repair.Enabled() && st.Quarantine != nil && st.Quarantine.Ladder != nil
}

// startLadder puts a fresh quarantine on its policy's ladder, or retires a device that relapsed
// RetireAfter times within policy.RelapseWindow.
func (g repairing) startLadder(now time.Time) []Action {
	st := g.st
	if !st.rules.Repair || !st.Policy.Repair.Enabled() || st.Quarantine == nil || st.State != Quarantined {
		return nil
	}
	st.Quarantine.Ladder = &Ladder{Due: true}
	if n := st.Policy.Repair.RetireAfter; n > 0 {
		if k := g.quarantinesSince(now.Add(-policy.RelapseWindow)); k >= n {
			return g.retire(fmt.Sprintf("quarantined %d times within %s (retireAfter %d): a lemon", k, policy.RelapseWindow, n), now)
		}
	}
	if why, ok := causeOf(st).retiresAtOnce(); ok {
		return g.retire(why, now)
	}
	step, note := causeOf(st).firstStep(st.Policy.Repair.Steps)
	st.Quarantine.Ladder.Step, st.Quarantine.Ladder.From = step, step
	if note != "" {
		st.transition(st.State, note, Actor, now)
	}
	return g.climb(now)
}

// quarantinesSince counts the quarantines taken since t, the current one included. Under
// LadderTrust only fences for a fault count: a restriction (Unknown for a whole tolerance window)
// says nothing of the device's hardware.
func (g repairing) quarantinesSince(t time.Time) int {
	st := g.st
	n := 0
	if q := st.Quarantine; q != nil && !q.CreatedAt.Before(t) && g.forFault(*q) {
		n++
	}
	for _, q := range st.Closed {
		if !q.CreatedAt.Before(t) && g.forFault(q) {
			n++
		}
	}
	return n
}

// forFault says whether a quarantine record counts toward retireAfter. A record written before
// records kept their state is a restriction when it carries a restriction's effect and the
// policy quarantines with another.
func (g repairing) forFault(q QuarantineRecord) bool {
	st := g.st
	switch {
	case !st.rules.LadderTrust:
		return true
	case q.State != "":
		return q.State == Quarantined
	}
	return q.Effect != policy.EffectNoSchedule || fenceOf(st).wantEffect(Quarantined) == policy.EffectNoSchedule
}

// climb runs the ladder's next try, once the device is idle: no Pod holds it (its holders moved,
// or there were none). A reset while a holder remains would kill its job.
func (g repairing) climb(now time.Time) []Action {
	st := g.st
	if !g.laddered() || st.State != Quarantined || st.Paused || held(st, st.Reporters) {
		return nil
	}
	l := st.Quarantine.Ladder
	if l.Running || !l.Due {
		return nil
	}
	l.Due = false
	if why, ok := causeOf(st).retiresAfterTry(l); ok {
		return g.retire(why, now)
	}
	steps := st.Policy.Repair.Steps
	switch {
	case l.Attempt == 0:
		l.Attempt = 1
	case l.Step < len(steps) && l.Attempt < steps[l.Step].Attempts:
		l.Attempt++
	default:
		l.Step, l.Attempt = l.Step+1, 1
	}
	if l.Step >= len(steps) {
		return g.retire(fmt.Sprintf("every step of the repair ladder failed (%d tries%s)", len(l.Tries), l.skipped(steps)), now)
	}
	s := steps[l.Step]
	if s.Approval && l.ApprovedTry != len(l.Tries)+1 {
		return g.askApproval(now)
	}
	l.Running = true
	l.Tries = append(l.Tries, RepairTry{Kind: s.Kind, Attempt: l.Attempt, At: now})
	// The trail gets the try once it ran (repaired): a try put off while the device is held is
	// taken again every minute, and says so once.
	reason := fmt.Sprintf("repair: %s, attempt %d of %d", s.Kind, l.Attempt, s.Attempts)
	check := s.Check
	return []Action{{Kind: ActRepair, Check: &check, Reason: reason, Actor: Actor}}
}

// repaired takes a step's outcome: a step that did its work is proven by the review; one that
// did not is the ladder's next try.
func (g repairing) repaired(res StepResult, now time.Time) []Action {
	st := g.st
	if !g.laddered() || !st.Quarantine.Ladder.Running {
		return nil
	}
	l := st.Quarantine.Ladder
	if res.Busy {
		retry := RepairRetry
		if len(res.Holders) > 0 {
			retry = MoveRetry
		}
		g.tryLater(res.Reason, now.Add(retry), now)
		return nil
	}
	if res.NotRun && st.rules.NotRunRetries {
		// The tooling failed, not the device: the same try is taken again later.
		at, acts := notRunOf(st).wait(ActRepair, st.Quarantine.CreatedAt.UTC().Format(time.RFC3339Nano), res, now)
		l.untry(st.Policy.Repair.Steps, at)
		return acts
	}
	notRunOf(st).ran(ActRepair)
	l.Running, l.RetryAt = false, time.Time{}
	try := &l.Tries[len(l.Tries)-1]
	try.Result = &res
	st.transition(st.State, fmt.Sprintf("repair: %s, attempt %d of %d: passed=%t %s", try.Kind, try.Attempt,
		st.Policy.Repair.Steps[l.Step].Attempts, res.Passed, res.Reason), Actor, now)
	if st.State != Quarantined {
		return nil // a person acted meanwhile (a release, a forced review): theirs stands
	}
	if !res.Passed {
		try.Review = "not run: the step failed"
		l.Due = true
		return g.tryFailed(*try, "failed: "+res.Reason, now)
	}
	return reviewOf(st).startReview(fmt.Sprintf("repair: %s attempt %d done (%s)", try.Kind, try.Attempt, res.Reason), Actor, now)
}

// stillBroken: a review found the device still broken (a probe or canary failed, or it was
// reported so during the review). The ladder, if any, takes its next try once the device is idle.
func (g repairing) stillBroken(now time.Time) []Action {
	st := g.st
	if !g.laddered() {
		return nil
	}
	l := st.Quarantine.Ladder
	l.Due = true
	if n := len(l.Tries); n > 0 && l.Tries[n-1].Result != nil && l.Tries[n-1].Result.Passed {
		return g.tryFailed(l.Tries[n-1], "ran, but the device is still broken", now)
	}
	return g.climb(now)
}

// toNodeStep moves a ladder whose sources ask for a node step (first) to its first node step after
// the current one: its next try is the node step, not the current step's next attempt, which the
// driver said cannot help. A ladder already there, or without one, is left alone.
func (g repairing) toNodeStep(first policy.First, now time.Time) {
	st := g.st
	if first != policy.FirstNode || !g.laddered() {
		return
	}
	l, steps := st.Quarantine.Ladder, st.Policy.Repair.Steps
	if l.Step >= len(steps) || steps[l.Step].Kind == policy.RepairNode {
		return
	}
	for i := l.Step + 1; i < len(steps); i++ {
		if steps[i].Kind != policy.RepairNode {
			continue
		}
		from := l.Step
		if l.Attempt > 0 {
			from++ // the current step was tried
		}
		for _, s := range steps[from:i] {
			l.SourcesSkipped = append(l.SourcesSkipped, s.Kind)
		}
		st.transition(st.State, fmt.Sprintf("its sources still ask for a node step: the ladder goes from its %s to its node step", steps[l.Step].Kind), Actor, now)
		l.Step, l.Attempt = i, 0
		return
	}
}

// skipped names the steps a failed ladder never tried and why: its cause started it past them, or
// its sources asked for a node step.
func (l *Ladder) skipped(steps []policy.RepairStep) string {
	var out string
	if l.From > 0 {
		var kinds []string
		for _, s := range steps[:l.From] {
			kinds = append(kinds, string(s.Kind))
		}
		out += "; its cause skipped " + strings.Join(kinds, ", ")
	}
	if len(l.SourcesSkipped) > 0 {
		var kinds []string
		for _, k := range l.SourcesSkipped {
			kinds = append(kinds, string(k))
		}
		out += "; its sources skipped " + strings.Join(kinds, ", ")
	}
	return out
}

// tryFailed takes the ladder's next try after a failed one and, under StepAlerts, warns what the
// try found and what comes next (the next try, a person's approval, or the device's retirement,
// which alerts on its own).
func (g repairing) tryFailed(try RepairTry, what string, now time.Time) []Action {
	st := g.st
	acts := g.climb(now)
	if !st.rules.StepAlerts || st.State == Retired {
		return acts
	}
	next := "the device waits for its review"
	switch l := st.Quarantine.Ladder; {
	case l.Awaiting:
		next = "the next step waits for a person's approval"
	case l.Running || l.Due:
		next = fmt.Sprintf("next: %s", st.Policy.Repair.Steps[l.Step].Kind) // a ladder past its last step retired above
	}
	alert := Action{Kind: ActAlert, Level: LevelWarning, Reason: fmt.Sprintf("repair %s attempt %d %s; %s", try.Kind, try.Attempt, what, next)}
	return append([]Action{alert}, acts...)
}

// justRan is the kind of the step whose try passed and whose review has not begun or ended: the
// path a review starting now follows ("" when none).
func (l *Ladder) justRan() policy.RepairKind {
	if n := len(l.Tries); n > 0 && l.Tries[n-1].Review == "" && l.Tries[n-1].Result != nil && l.Tries[n-1].Result.Passed {
		return l.Tries[n-1].Kind
	}
	return ""
}

// reviewEnded records on the try before it how a review ended (its first review only).
func (g reviewing) reviewEnded(outcome string) {
	st := g.st
	if !repairOf(st).laddered() {
		return
	}
	l := st.Quarantine.Ladder
	if n := len(l.Tries); n > 0 && l.Tries[n-1].Review == "" && l.Tries[n-1].Result != nil {
		l.Tries[n-1].Review = outcome
	}
}

// retire gives the device up: it stays fenced, is never reviewed again, and its evidence is written.
func (g repairing) retire(reason string, now time.Time) []Action {
	st := g.st
	st.Review = nil
	st.transition(Retired, "retired: "+reason, Actor, now)
	return []Action{
		{Kind: ActRetire, Reason: reason, Actor: Actor},
		{Kind: ActAlert, Level: LevelCritical, Reason: "device retired: " + reason + "; replace it (`device release` needs an approval)"},
	}
}

// evidence is a retired device's record for the people who replace it: every fault, step and
// probe of the quarantine, with times.
func (g repairing) evidence() map[string]string {
	st := g.st
	out := map[string]string{"device": st.Device.String(), "node": st.Node, "state": string(st.State)}
	if q := st.Quarantine; q != nil {
		out["quarantined"] = q.CreatedAt.UTC().Format(time.RFC3339) + " " + q.Reason
		if q.Ladder != nil {
			for i, t := range q.Ladder.Tries {
				s := fmt.Sprintf("%s %s attempt %d", t.At.UTC().Format(time.RFC3339), t.Kind, t.Attempt)
				if t.Result != nil {
					s += fmt.Sprintf(": passed=%t %s", t.Result.Passed, t.Result.Reason)
				}
				if t.Review != "" {
					s += "; review: " + t.Review
				}
				out[fmt.Sprintf("try-%02d", i+1)] = s
			}
		}
	}
	if p := st.LastProbe; p != nil {
		out["last-probe"] = fmt.Sprintf("%s passed=%t %s", p.At.UTC().Format(time.RFC3339), p.Passed, p.Reason)
	}
	for i, q := range st.Closed {
		out[fmt.Sprintf("earlier-%02d", i+1)] = fmt.Sprintf("%s to %s: %s", q.CreatedAt.UTC().Format(time.RFC3339), q.ClosedAt.UTC().Format(time.RFC3339), q.Reason)
	}
	for i, t := range st.Transitions {
		out[fmt.Sprintf("transition-%03d", i+1)] = fmt.Sprintf("%s %s -> %s by %s: %s", t.At.UTC().Format(time.RFC3339), t.From, t.To, t.Actor, t.Reason)
	}
	return out
}

// ladderRetry is when a try that found the device busy looks again; zero when none waits.
func (g repairing) ladderRetry() time.Time {
	st := g.st
	if !g.laddered() || st.State != Quarantined || st.Paused {
		return time.Time{}
	}
	return st.Quarantine.Ladder.RetryAt
}

// tryLater undoes a try that never ran (the device still held, the breaker's reset budget spent):
// it is taken again at at, or once the device is reported idle.
func (g repairing) tryLater(reason string, at, now time.Time) {
	st := g.st
	if !g.laddered() || !st.Quarantine.Ladder.Running {
		return
	}
	st.Quarantine.Ladder.untry(st.Policy.Repair.Steps, at)
	// A device held for hours is looked at every minute: the trail says so once per reason.
	if n := len(st.Transitions); n == 0 || st.Transitions[n-1].Reason != "repair waits: "+reason {
		st.transition(st.State, "repair waits: "+reason, Actor, now)
	}
}

// untry takes back the running try, which did not run: the ladder takes it again at at.
func (l *Ladder) untry(steps []policy.RepairStep, at time.Time) {
	l.Running = false
	l.Tries = l.Tries[:len(l.Tries)-1]
	l.rewind(steps)
	l.Due, l.RetryAt = true, at
}

// rewind takes the ladder back one try, so that climb takes the same step and attempt again.
func (l *Ladder) rewind(steps []policy.RepairStep) {
	if l.Attempt--; l.Attempt == 0 && l.Step > 0 {
		l.Step, l.Attempt = l.Step-1, steps[l.Step-1].Attempts
	}
}

// repairedBy is the step whose try the review being passed followed ("" when the quarantine took
// no try): a device a repair brought back was broken, not falsely quarantined.
//
// Only the review that followed a step that passed counts: not a retired device a person
// releases (no step brought it back), nor a review the quarantine came to on its own after a
// failed try.
func (g repairing) repairedBy() string {
	st := g.st
	if st.Quarantine == nil || st.Quarantine.Ladder == nil || len(st.Quarantine.Ladder.Tries) == 0 {
		return ""
	}
	last := st.Quarantine.Ladder.Tries[len(st.Quarantine.Ladder.Tries)-1]
	if r := st.Review; r == nil || r.From == Retired || last.Result == nil || !last.Result.Passed || last.Review != "" {
		return ""
	}
	return string(last.Kind)
}

// repairStep says where a quarantine stands on its ladder, for the Temporal UI: the step and its
// try ("reset 1/2") from the first try until the quarantine ends; "" otherwise.
func (g repairing) repairStep() string {
	st := g.st
	if !g.laddered() || len(st.Quarantine.Ladder.Tries) == 0 || (st.State != Quarantined && st.State != Recovering) {
		return ""
	}
	l := st.Quarantine.Ladder
	t := l.Tries[len(l.Tries)-1]
	return fmt.Sprintf("%s %d/%d", t.Kind, t.Attempt, st.Policy.Repair.Steps[min(l.Step, len(st.Policy.Repair.Steps)-1)].Attempts)
}

// bootSeen is the node's boot ID the quarantine's latest try saw ("" when none recorded one): a
// node step that finds another has no reboot to ask for.
func (g repairing) bootSeen() string {
	st := g.st
	if st.Quarantine == nil || st.Quarantine.Ladder == nil {
		return ""
	}
	if w := st.NotRun; w != nil && w.Kind == ActRepair && w.BootID != "" {
		return w.BootID // the try taken again after it did not run
	}
	tries := st.Quarantine.Ladder.Tries
	for i := len(tries) - 1; i >= 0; i-- {
		if r := tries[i].Result; r != nil && r.BootID != "" {
			return r.BootID
		}
	}
	return ""
}

// unmendedSince is when the device's fault was last left unmended: the end of the quarantine's
// latest try that ran, or else its start.
func (q *QuarantineRecord) unmendedSince() time.Time {
	at := q.CreatedAt
	if l := q.Ladder; l != nil {
		for _, t := range l.Tries {
			if t.Result != nil && t.Result.At.After(at) {
				at = t.Result.At
			}
		}
	}
	return at
}

// repairing is the quarantine's repair ladder: which step comes next, its tries and approvals,
// and retirement with the evidence.
type repairing struct{ st *DeviceState }

func repairOf(st *DeviceState) repairing { return repairing{st} }
