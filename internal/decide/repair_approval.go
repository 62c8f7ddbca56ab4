package decide

import (
	"fmt"
	"time"
)

// A ladder step whose policy says `approval: true` (a node's reboot, say) runs only once a person
// approved it: the ladder waits, asks (Slack, or `device approve` on the CLI), and runs the step on
// approval. A rejection, or no answer within the policy's approvalTimeout, stops the ladder: the
// quarantine waits for its review, as a review that ends without approval does.

// askApproval puts the try climb is about to take on hold until a person approves it.
func (g repairing) askApproval(now time.Time) []Action {
	st := g.st
	l := st.Quarantine.Ladder
	s := st.Policy.Repair.Steps[l.Step]
	l.Awaiting, l.ApprovalUntil = true, now.Add(st.Policy.ApprovalTimeout.D())
	if st.rules.LadderTrust {
		// Kept on the record, so that a queried state (which carries no rules) names it too.
		l.Ask = fmt.Sprintf("repair-%d-%s-%s", len(l.Tries)+1, s.Kind, st.Quarantine.CreatedAt.UTC().Format(time.RFC3339Nano))
		if st.rules.FreshAsks {
			if l.Asks++; l.Asks > 1 {
				l.Ask += fmt.Sprintf("-ask%d", l.Asks)
			}
		}
	}
	st.transition(st.State, fmt.Sprintf("repair: %s, attempt %d of %d, waits for a person's approval (until %s)",
		s.Kind, l.Attempt, s.Attempts, l.ApprovalUntil.UTC().Format(time.RFC3339)), Actor, now)
	return []Action{{Kind: ActRequestApproval, Actor: Actor,
		Reason: fmt.Sprintf("repair step %s (attempt %d of %d) on node %s: %d tries so far", s.Kind, l.Attempt, s.Attempts, st.Node, len(l.Tries))}}
}

// stepAwaiting says whether a ladder step waits for a person's approval now. It reads the record
// alone (not the run's rules), so a queried state answers it too.
func (g repairing) stepAwaiting() bool {
	st := g.st
	q := st.Quarantine
	return q != nil && q.Ladder != nil && q.Ladder.Awaiting && q.Ladder.Step < len(st.Policy.Repair.Steps) &&
		st.State == Quarantined && st.Review == nil
}

// StepApproval names the ladder step waiting for approval and the ID its approval must carry;
// both "" when none waits. A message left over from an earlier step decides nothing on a later
// one. Under LadderTrust the ID names the one ask: the quarantine (when it began), the step and
// the try (repair-<try>-<step>-<quarantine>), so a button from an earlier quarantine of the
// device approves nothing in this one; before, it was repair-<try>.
func (st *DeviceState) StepApproval() (id, step string) {
	if !repairOf(st).stepAwaiting() {
		return "", ""
	}
	l := st.Quarantine.Ladder
	kind := string(st.Policy.Repair.Steps[l.Step].Kind)
	if l.Ask != "" {
		return l.Ask, kind
	}
	return fmt.Sprintf("repair-%d", len(l.Tries)+1), kind
}

// Ask is the ID of the approval waiting now: a ladder step's (StepApproval) or a release
// review's (Review.ID); "" when nothing waits. An approval accepted without an ID is bound to
// the ask waiting when it was accepted, so that it approves nothing else where it is applied.
func (st *DeviceState) Ask() string {
	if id, _ := st.StepApproval(); id != "" {
		return id
	}
	if r := st.Review; r != nil && r.Stage == StageApproval {
		return r.ID()
	}
	return ""
}

// approveStep runs the waiting step, once the device is idle and automatic actions are not paused.
func (g repairing) approveStep(actor string, now time.Time) []Action {
	st := g.st
	l := st.Quarantine.Ladder
	_, kind := st.StepApproval()
	l.endAsk()
	l.ApprovedTry, l.ApprovedBy = len(l.Tries)+1, actor
	st.transition(st.State, fmt.Sprintf("repair: %s step approved by %s", kind, actor), actor, now)
	l.rewind(st.Policy.Repair.Steps)
	l.Due = true
	return g.climb(now)
}

// stopForApproval ends the ladder's wait without the step: rejected, or not answered in time.
func (g repairing) stopForApproval(why, actor string, now time.Time) []Action {
	st := g.st
	l := st.Quarantine.Ladder
	_, kind := st.StepApproval()
	l.endAsk()
	l.Due = false
	if st.rules.LadderTrust {
		l.rewind(st.Policy.Repair.Steps) // the step never ran: a later failed review asks for it again, it does not climb past it
	}
	st.transition(st.State, fmt.Sprintf("repair stopped: %s step %s; the quarantine waits for its review", kind, why), actor, now)
	return nil
}

// askOvertaken undoes an ask for approval that a release review overtook (a person's `device
// release` while the step waited): the step never ran, so the ladder's next climb takes it again.
func (g repairing) askOvertaken() {
	st := g.st
	if !st.rules.LadderTrust || !g.laddered() || !st.Quarantine.Ladder.Awaiting {
		return
	}
	st.Quarantine.Ladder.endAsk()
	st.Quarantine.Ladder.rewind(st.Policy.Repair.Steps)
}

// endAsk ends the wait for a step's approval: approved, stopped or overtaken.
func (l *Ladder) endAsk() { l.Awaiting, l.ApprovalUntil, l.Ask = false, time.Time{}, "" }

// stepApprovalDue is when a waiting step's approval runs out; zero when none waits.
func (g repairing) stepApprovalDue() time.Time {
	st := g.st
	if !g.stepAwaiting() {
		return time.Time{}
	}
	return st.Quarantine.Ladder.ApprovalUntil
}
