package workflows

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// ladderModel holds the device workflow to the repair ladder's promises on its rare paths: an
// approval is applied only to the ask it names; a device is retired only after every step ran;
// no node fence or node permit outlives every step that holds it. The moves that reach those
// paths: approvals naming an older ask, a rule a person deletes, node steps that fail outright.
// Every method is called with the device model's lock held.
type ladderModel struct {
	kinds []policy.RepairKind // the policy's steps
	// quarantine numbers the quarantines; ranIn the steps that ran in the current one, last the
	// latest of them and passed whether it cleared the fault.
	quarantine int
	ranIn      map[policy.RepairKind]bool
	last       policy.RepairKind
	passed     bool
	// asks are the approval requests sent, oldest first; validAt is when an approval last named
	// the node step's current ask.
	asks    []simAsk
	validAt time.Time
	// bareAt is when an approval naming no ask was last sent: the workflow binds it to the ask
	// waiting when it takes it, which may be one asked in that instant after the model sent it.
	bareAt time.Time
	// named is when an approval last named each ask (its ID, in its quarantine): an ask made
	// again in that instant, with the same ID (the same quarantine, step and try), is the one it
	// answers.
	named map[simAsk]time.Time
	// fenced: a node step moving holders fenced the node; nodePermit: a node permit was granted
	// and no step's end gave it back.
	fenced, nodePermit bool
	// nodeFails: the next node step attempts fail with an error; outright: a node step's last
	// attempt failed, and nothing cleared what it left since.
	nodeFails int
	outright  bool
	// retireAfter is the policy's; faults counts the fences the workflow made for a fault (a new
	// Quarantined rule), restrictions those for Unknown (a new Restricted rule), across the
	// device's runs: one that ends idle leaves its history to the next.
	retireAfter, faults int
	// lemonDue: the newest fence for a fault made retireAfter, so its quarantine retires the
	// device before any try (all the sequence's fences fall within retireAfter's 30 days).
	lemonDue bool
}

// simAsk is one approval request: its ID, whether it asks about a step, and its quarantine.
type simAsk struct {
	id         string
	step       bool
	quarantine int
}

func (l *ladderModel) quarantined() {
	l.quarantine++
	l.ranIn, l.last, l.passed = map[policy.RepairKind]bool{}, "", false
}

func (l *ladderModel) ran(action decide.State) {
	if l.ranIn == nil {
		l.ranIn = map[policy.RepairKind]bool{}
	}
	l.last, l.passed = policy.RepairReset, false
	if action == breaker.Reboot {
		l.last = policy.RepairNode
	}
	l.ranIn[l.last] = true
}

// released checks what a release counts as repaired: only a device its quarantine's last step
// cleared, and never a retired device a person brings back.
func (l *ladderModel) released(m *deviceModel, in remediation.ReleaseInput) {
	if in.RepairedBy == "" {
		return
	}
	if m.retired {
		m.violate("a retired device released by %q counts as repaired by its %s step", in.Actor, in.RepairedBy)
	}
	if !l.passed || string(l.last) != in.RepairedBy {
		m.violate("the release counts as repaired by %s, but this quarantine's last step was %q (passed %v)", in.RepairedBy, l.last, l.passed)
	}
}

func (l *ladderModel) permit(action decide.State) {
	if action == breaker.Reboot {
		l.nodePermit, l.outright = true, false
	}
}

// nodeStepEnded takes a node step's answer as the activity gives it: one that moves holders keeps
// the node fenced and its permit; any other gives the permit back, and one that ran lifts the fence.
func (l *ladderModel) nodeStepEnded(res decide.StepResult) {
	if res.Busy && len(res.Holders) > 0 {
		return
	}
	l.nodePermit = false
	if !res.Busy {
		l.fenced = false
	}
}

func (l *ladderModel) asked(in notify.ApprovalRequest, now time.Time) {
	l.asks = append(l.asks, simAsk{id: in.Review, step: in.Step != "", quarantine: l.quarantine})
	if in.Step != "" && !l.bareAt.IsZero() && now.Sub(l.bareAt) < time.Second {
		l.validAt = now
	}
	if at, ok := l.named[simAsk{id: in.Review, step: true, quarantine: l.quarantine}]; in.Step != "" && ok && at.Equal(now) {
		l.validAt = now
	}
}

// approving is the Review an approval names: "" (the ask waiting now), with older -1 the newest
// ask's ID (as its Slack button sends it), with older > 0 an earlier ask's ID (an old button). It
// notes when an approval names the node step's ask of this quarantine.
func (l *ladderModel) approving(older int, now time.Time) string {
	if len(l.asks) == 0 {
		l.bareAt = now
		return ""
	}
	cur := l.asks[len(l.asks)-1]
	if older == 0 {
		l.bareAt = now // the workflow binds it to what waits when it takes it
	}
	picked, id := cur, ""
	if older < 0 {
		id = cur.id
	}
	if older > 0 {
		// An old button: the newest step ask of an earlier quarantine, else one older back.
		picked = l.asks[max(0, len(l.asks)-1-older)]
		for i := len(l.asks) - 1; i >= 0; i-- {
			if a := l.asks[i]; a.step && a.quarantine != cur.quarantine {
				picked = a
				break
			}
		}
		id = picked.id
	}
	if id != "" {
		if l.named == nil {
			l.named = map[simAsk]time.Time{}
		}
		l.named[picked] = now
	}
	if cur.step && picked.step && picked.id == cur.id && picked.quarantine == cur.quarantine {
		l.validAt = now
	}
	return id
}

// stepRuns checks a node step that needs approval: an approval named its ask since it was made.
func (l *ladderModel) stepRuns(m *deviceModel) {
	if l.validAt.Before(m.stepAskedAt) {
		m.violate("a node step ran on an approval that answered another ask (asked %s, last approval of this ask %s)",
			m.stepAskedAt.Format("15:04:05"), l.validAt.Format("15:04:05"))
	}
}

// fence counts a new rule the workflow made for a decision.
func (l *ladderModel) fence(decision string) {
	if decision == string(decide.Quarantined) {
		l.faults++
		l.lemonDue = l.retireAfter > 0 && len(l.kinds) > 0 && l.faults >= l.retireAfter
	}
}

// retired checks a retirement: a lemon's counts quarantines for a fault only (not restrictions);
// one for a failed ladder comes only after every step ran.
func (l *ladderModel) retired(m *deviceModel, reason string) {
	if strings.Contains(reason, "a lemon") && l.faults < l.retireAfter {
		m.violate("retired as a lemon (%s) after %d quarantines for a fault, fewer than retireAfter %d", reason, l.faults, l.retireAfter)
	}
	if !strings.Contains(reason, "every step of the repair ladder failed") {
		return
	}
	for _, k := range l.kinds {
		// A step its cause skipped (the cause model holds the choice to the cause), or its
		// sources passed over for a node step, is no step that had to run.
		skipped := strings.Contains(reason, "its cause skipped "+string(k)) ||
			m.causes.nodeVerdict && strings.Contains(reason, "its sources skipped "+string(k))
		if !l.ranIn[k] && !skipped {
			m.violate("retired (%s) although its %s step never ran", reason, k)
		}
	}
}

// check holds the node to the device's steps: a node permit is held only while a step moves the
// node's holders, and nothing of a node step stands once the device is out of quarantine.
func (l *ladderModel) check(m *deviceModel, after string, state decide.State) {
	if l.nodePermit && l.outright {
		m.violate("after %s: a node step failed outright and left the node's permit held", after)
	}
	if state != decide.Released && state != decide.Healthy {
		return
	}
	if m.retired {
		m.violate("after %s: a retired device is %s without a person's approved release", after, state)
	}
	if l.fenced {
		m.violate("after %s: the node stays fenced although the device is %s: no node step holds the fence", after, state)
	}
	if l.nodePermit {
		m.violate("after %s: the node permit is held although the device is %s: no node step holds it", after, state)
	}
}

// activities adds the ladder's activities to the model's.
func (l *ladderModel) activities(env *testsuite.TestWorkflowEnvironment, m *deviceModel) {
	env.OnActivity("EndNodeStep", mock.Anything, mock.Anything).Return(func(_ context.Context, in remediation.NodeInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.note("EndNodeStep of node %s", in.Node)
		l.fenced, l.nodePermit, l.outright = false, false, false
		return nil
	}).Maybe()
}

// nodeFailed says whether the next node step attempt fails with an error (after the activity may
// have made its object: the step could not tell).
func (l *ladderModel) nodeFailed(attempt int32) error {
	if l.nodeFails == 0 {
		return nil
	}
	l.nodeFails--
	l.outright = attempt >= checkAttempts // the workflow gives the node step as many as a check
	return errors.New("apiserver unavailable")
}
