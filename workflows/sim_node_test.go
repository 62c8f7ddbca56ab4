package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// nodeModel is a node's failed devices as their device workflows report them, and the alerts the
// node workflow sent.
type nodeModel struct {
	carrier
	simLog
	mu        sync.Mutex
	failed    map[string]bool // devices reported failed
	threshold int             // the newest threshold reported
	reachedAt int             // failed devices when the threshold was first reached (0: not yet)
	alertDown int             // the next Alert attempts fail
	alerts    int             // escalation alerts delivered
	escalated bool            // the state said escalated
	alertLost bool            // an alert failed every attempt
}

func (m *nodeModel) activities(env *testsuite.TestWorkflowEnvironment) {
	registerActivities(env)
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(func(ctx context.Context, in notify.AlertInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.alertDown > 0 {
			m.alertDown--
			n := activity.GetInfo(ctx).Attempt
			m.note("  Alert attempt %d failed", n)
			m.alertLost = m.alertLost || n >= 5 // notifyOptions: 5 attempts
			return errors.New("slack unavailable")
		}
		m.alerts++
		m.note("  Alert %s: %s", in.Level, in.Text)
		return nil
	}).Maybe()
}

func nodeSteps(rt *rapid.T, m *nodeModel) []step {
	n := rapid.IntRange(1, 40).Draw(rt, "steps")
	var steps []step
	tl := &timeline{at: time.Second}
	for i := range n {
		gap := rapid.SampledFrom([]time.Duration{0, time.Second, time.Minute, time.Hour}).Draw(rt, fmt.Sprintf("gap%d", i))
		s := step{at: tl.next(gap)}
		switch rapid.SampledFrom([]string{"fail", "fail", "fail", "slack", "continue-as-new"}).Draw(rt, fmt.Sprintf("kind%d", i)) {
		case "fail":
			dev := fmt.Sprintf("gpu-%d", rapid.IntRange(0, 5).Draw(rt, fmt.Sprintf("device%d", i)))
			threshold := rapid.SampledFrom([]int{0, 2, 2, 3}).Draw(rt, fmt.Sprintf("threshold%d", i))
			state := rapid.SampledFrom([]decide.State{decide.Quarantined, decide.Restricted}).Draw(rt, fmt.Sprintf("state%d", i))
			f := escalation.NodeFailure{Node: "node-1", Device: dev, State: state, Threshold: threshold}
			s.what = fmt.Sprintf("%s %s (threshold %d)", dev, state, threshold)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				m.failed[dev] = true
				if threshold > 0 {
					m.threshold = threshold
				}
				if m.reachedAt == 0 && m.threshold > 0 && len(m.failed) >= m.threshold {
					m.reachedAt = len(m.failed)
				}
				m.mu.Unlock()
				m.signal(env, api.SignalDeviceFailed, f)
			}
		case "slack":
			k := rapid.IntRange(1, 7).Draw(rt, fmt.Sprintf("down%d", i))
			s.what = fmt.Sprintf("the next %d alerts fail", k)
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.alertDown = k; m.mu.Unlock() }
		case "continue-as-new":
			s = continueAsNewStep(tl)
		}
		steps = append(steps, s)
	}
	return steps
}

// checkNode holds the node's state to the failures reported so far.
func (m *nodeModel) checkNode(env *testsuite.TestWorkflowEnvironment, after string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stepped(env, after)
	if m.alerts > 1 {
		m.violate("the node escalated %d times", m.alerts)
	}
	var st escalation.NodeState
	if !m.look(env, after, &st) {
		return
	}
	m.note("  failed %v threshold %d escalated %v", st.Failed, st.Threshold, st.Escalated)
	for _, d := range st.Failed {
		if !m.failed[d] {
			m.violate("%s listed failed, never reported", d)
		}
	}
	if m.escalated && !st.Escalated {
		m.violate("the escalation was forgotten")
	}
	m.escalated = st.Escalated
	if st.Escalated && m.reachedAt == 0 {
		m.violate("escalated with %d failed devices, under every threshold reported", len(st.Failed))
	}
	if !slices.IsSorted(st.Failed) || len(slices.Compact(slices.Clone(st.Failed))) != len(st.Failed) {
		m.violate("failed devices %v not a sorted set", st.Failed)
	}
}

// TestSimulateNodeWorkflow runs generated sequences of device failures on one node (repeated
// devices, changing thresholds, none), Slack failing for a few attempts or for longer than the
// alert's retries, and continue-as-new, holding it to: it lists only devices reported, none twice;
// it escalates at most once, never under the threshold, and never forgets it did; the query
// answers; and at the end every device reported is listed and the node escalated once the
// threshold was reached, alerting once unless Slack was down through every retry.
func TestSimulateNodeWorkflow(t *testing.T) { simulate(t, 300, nodeProperty) }

func nodeProperty(rt *rapid.T) {
	m := &nodeModel{failed: map[string]bool{}}
	steps := nodeSteps(rt, m)
	last := steps[len(steps)-1].at + time.Minute
	var final escalation.NodeState
	steps = append(steps, step{at: last, what: "final look", do: func(env *testsuite.TestWorkflowEnvironment) { _, _ = query(env, &final) }})
	if err := segments(rt, &m.carrier, NodeWorkflow, api.NodeInput{Node: "node-1"}, false, last+time.Minute, steps, quietEnv(m.activities), m.checkNode); err != nil {
		m.violate("the workflow failed: %v", err)
	}
	// An activity the environment still retries after the run ended may touch the model: the end
	// is judged under its lock.
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(final.Failed) != len(m.failed) {
		m.violate("%d devices reported failed, %d listed: %v", len(m.failed), len(final.Failed), final.Failed)
	}
	if m.reachedAt > 0 && !final.Escalated {
		m.violate("the threshold was reached at %d failed devices, but the node did not escalate", m.reachedAt)
	}
	if final.Escalated && m.alerts == 0 && !m.alertLost {
		m.violate("escalated without an alert, and Slack was not down through every retry")
	}
	m.fail(rt)
}
