package decide

import (
	"fmt"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// A check or repair step that ended not run (StepResult.NotRun) says nothing of the device: its
// image was not pulled, its Pod never scheduled or was evicted, its tool answered that it could
// not run. Under Rules.NotRunRetries it is taken again, later each time (the policy's notRunRetry
// doubling to policy.MaxNotRunRetry); after the policy's notRunAlertAfter in a row a person is
// alerted, and it goes on being taken every MaxNotRunRetry, so a mended registry brings the device
// back on its own. It never fails a review, never moves the ladder, and never retires the device.

// NotRunWait is a check or step that did not run, and when it is taken again.
type NotRunWait struct {
	// Kind is what did not run: ActProbe, ActCanary or ActRepair.
	Kind ActionKind `json:"kind"`
	// Review is the review a probe or canary was run for (Review.ID); it waits for that review only.
	Review string `json:"review,omitempty"`
	// Count is how many of Kind ended not run in a row.
	Count   int       `json:"count"`
	Reason  string    `json:"reason"`
	RetryAt time.Time `json:"retryAt,omitempty"`
	// BootID is the boot ID a step that did not run saw before it (a node step whose node booted
	// again but whose node check did not run): the try taken again finds that reboot done.
	BootID string `json:"bootID,omitempty"`
}

// notRun is the tooling's way: what to do with a check or step that did not run.
type notRun struct{ st *DeviceState }

func notRunOf(st *DeviceState) notRun { return notRun{st} }

// wait records a check or step of kind that did not run and returns when it is taken again, and
// the alert to send when this one is the policy's notRunAlertAfter-th in a row.
func (g notRun) wait(kind ActionKind, review string, res StepResult, now time.Time) (time.Time, []Action) {
	st := g.st
	w := st.NotRun
	if w == nil || w.Kind != kind || w.Review != review {
		w = &NotRunWait{Kind: kind, Review: review}
	}
	w.Count++
	w.Reason, w.BootID = res.Reason, res.BootID
	w.RetryAt = now.Add(notRunBackoff(w.Count, st.Policy.NotRunRetry.D()))
	st.NotRun = w
	st.transition(st.State, fmt.Sprintf("%s not run (%d in a row): %s; the tooling failed, not the device: taken again at %s",
		kind, w.Count, res.Reason, w.RetryAt.UTC().Format(time.RFC3339)), Actor, now)
	if w.Count != alertAfter(st.Policy) {
		return w.RetryAt, nil
	}
	return w.RetryAt, []Action{{Kind: ActAlert, Level: LevelWarning, Reason: fmt.Sprintf(
		"%s of %s did not run, %d in a row (%s): the tooling failed, not the device. It stays fenced, nothing counts against it, "+
			"and the %s is taken again every %s: mend the check (its image, its scheduling, the tool) or decide with `device` commands",
		kind, st.Device, w.Count, res.Reason, kind, policy.MaxNotRunRetry)}}
}

// ran clears the wait: a check or step of kind ran and gave its verdict.
func (g notRun) ran(kind ActionKind) {
	if w := g.st.NotRun; w != nil && w.Kind == kind {
		g.st.NotRun = nil
	}
}

// checkDue is the probe or canary to take again now, if its review still waits for it. A device
// whose automatic actions are paused waits: its resume takes the check.
func (g notRun) checkDue(now time.Time) []Action {
	st := g.st
	w := st.NotRun
	if w == nil || w.Kind == ActRepair || w.RetryAt.IsZero() || now.Before(w.RetryAt) || st.Paused {
		return nil
	}
	w.RetryAt = time.Time{}
	r := st.Review
	if r == nil || st.State != Recovering || r.ID() != w.Review || (w.Kind == ActProbe) != (r.Stage == StageProbe) ||
		(w.Kind == ActCanary) != (r.Stage == StageCanary) {
		st.NotRun = nil // the review ended, or went on, meanwhile
		return nil
	}
	check := st.Policy.ProbeFor(r.After)
	if w.Kind == ActCanary {
		check = st.Policy.Canary
	}
	return []Action{{Kind: w.Kind, Check: &check, Reason: fmt.Sprintf("%s taken again: it did not run (%s)", w.Kind, w.Reason), Actor: Actor}}
}

// pending is the check or step that did not run and still waits to be taken again (nil: none).
func (g notRun) pending() *NotRunWait {
	st := g.st
	w := st.NotRun
	switch {
	case w == nil || w.RetryAt.IsZero():
		return nil
	case w.Kind == ActRepair:
		if st.State != Quarantined || !repairOf(st).laddered() || !st.Quarantine.Ladder.RetryAt.Equal(w.RetryAt) {
			return nil
		}
	case st.Review == nil || st.State != Recovering || st.Review.ID() != w.Review:
		return nil
	}
	return w
}

// checkAt is when a probe or canary that did not run is taken again (zero: none waits, or the
// device's automatic actions are paused).
func (g notRun) checkAt() time.Time {
	if w := g.st.NotRun; w != nil && w.Kind != ActRepair && !g.st.Paused {
		return w.RetryAt
	}
	return time.Time{}
}

// notRunBackoff is the wait after the n-th not-run in a row: first (the policy's notRunRetry, or
// its default in a policy written before it), doubling up to policy.MaxNotRunRetry.
func notRunBackoff(n int, first time.Duration) time.Duration {
	d := first
	if d <= 0 {
		d = policy.DefaultNotRunRetry
	}
	for i := 1; i < n && d < policy.MaxNotRunRetry; i++ {
		d *= 2
	}
	return min(d, policy.MaxNotRunRetry)
}

// alertAfter is the policy's notRunAlertAfter, or its default in a policy written before it.
func alertAfter(p policy.Policy) int {
	if p.NotRunAlertAfter > 0 {
		return p.NotRunAlertAfter
	}
	return policy.DefaultNotRunAlertAfter
}
