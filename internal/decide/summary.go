package decide

import (
	"fmt"
	"time"
)

// Summary is the one line a person reads about a device: its state and since when, why, by whom,
// and what happens next. The CLI prints it and the workflow shows it in the Temporal UI.
func (st *DeviceState) Summary() string {
	s := string(st.State)
	if n := len(st.Transitions); n > 0 {
		t := st.Transitions[n-1]
		s += fmt.Sprintf(" since %s (%s, by %s)", t.At.UTC().Format(time.RFC3339), t.Reason, t.Actor)
	}
	if st.Paused {
		s += "; automatic actions paused"
	}
	return s + "; next: " + st.Next()
}

// Next says what the workflow will do next, and when.
func (st *DeviceState) Next() string {
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case st.Held != nil && st.Paused:
		return fmt.Sprintf("%s held until resumed (%s)", st.Held.To, st.HeldReason)
	case st.Held != nil:
		return fmt.Sprintf("retry %s at %s (%s)", st.Held.To, at(st.RetryAt), st.HeldReason)
	case notRunOf(st).pending() != nil:
		w := st.NotRun
		return fmt.Sprintf("%s taken again at %s: it did not run (%d in a row; the tooling failed, not the device: %s)", w.Kind, at(w.RetryAt), w.Count, w.Reason)
	case st.State == Recovering && st.Review != nil:
		switch st.Review.Stage {
		case StageProbe:
			return "probe running on the device"
		case StageProbation, StageCanary:
			return "canary running on probation"
		case StageStability:
			return "release at " + at(st.Review.Until) + " if nothing is reported"
		case StageSources:
			return "waiting until " + at(st.Review.Until) + " for its sources to say Healthy, else the next try"
		case StageApproval:
			return "waiting for approval until " + at(st.Review.Until) + " (devicewarden device approve|reject)"
		case StageRelease:
			return "deleting the rule"
		}
	case repairOf(st).stepAwaiting():
		_, step := st.StepApproval()
		return "repair step " + step + " waits for approval until " + at(st.Quarantine.Ladder.ApprovalUntil) + " (devicewarden device approve|reject)"
	case st.State == Retired:
		return "nothing: retired, replace it (`device release` runs a review that needs an approval)"
	case st.State == Quarantined && repairOf(st).laddered() && st.Quarantine.Ladder.Running:
		return "repair step running on the device"
	case st.State == Quarantined && repairOf(st).laddered() && held(st, st.Reporters):
		return "repair once no Pod holds the device"
	case st.State == Quarantined && st.Quarantine != nil && st.rules.ReleasePath && !st.Paused:
		return "recovery review (probe, canary, probation) at " + at(st.Quarantine.ExpiresAt) + ", or on `device release`"
	case (st.State == Quarantined || st.State == Restricted) && st.Quarantine != nil:
		return "lease renewed at " + at(st.Quarantine.ExpiresAt)
	case st.State == Suspect:
		return "restrict at " + at(st.ToleranceUntil) + " unless it reports Healthy"
	}
	return "nothing until the device reports trouble"
}
