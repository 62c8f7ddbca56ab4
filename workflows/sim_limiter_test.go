package workflows

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// limiterModel is the migrations around the limiter: which asked, were told they have a slot,
// released it, or are gone (terminated: a signal to them fails).
type limiterModel struct {
	carrier
	simLog
	perNode, clusterWide int
	node                 map[string]string // migration -> its node
	told                 map[string]bool   // told it holds a slot (slot-granted reached it)
	released             map[string]bool   // released since it was last told
	gone                 map[string]bool
}

func limiterSteps(rt *rapid.T, m *limiterModel) []step {
	n := rapid.IntRange(1, 60).Draw(rt, "steps")
	migrations := rapid.IntRange(1, 8).Draw(rt, "migrations")
	nodes := rapid.IntRange(1, 3).Draw(rt, "nodes")
	var steps []step
	tl := &timeline{at: time.Second}
	for i := range n {
		gap := rapid.SampledFrom([]time.Duration{0, 0, time.Second, time.Minute}).Draw(rt, fmt.Sprintf("gap%d", i))
		id := fmt.Sprintf("migrate/m%d", rapid.IntRange(0, migrations-1).Draw(rt, fmt.Sprintf("migration%d", i)))
		node := fmt.Sprintf("node-%d", rapid.IntRange(0, nodes-1).Draw(rt, fmt.Sprintf("node%d", i)))
		if m.node[id] == "" {
			m.node[id] = node // a migration stays on its node
		}
		node = m.node[id]
		s := step{at: tl.next(gap)}
		switch rapid.SampledFrom([]string{"acquire", "acquire", "release", "gone", "sweep", "continue-as-new"}).Draw(rt, fmt.Sprintf("kind%d", i)) {
		case "acquire":
			req := migrationplan.SlotRequest{ID: id, Node: node, PerNode: m.perNode, ClusterWide: m.clusterWide}
			s.what = "acquire " + id + " on " + node
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				if !m.gone[id] {
					m.signal(env, api.SignalSlotAcquire, req)
				}
			}
		case "release":
			// An instant of its own: the limiter takes acquire and release from two channels, in no
			// order between them, and a migration never releases and asks again at once.
			s.at = tl.own()
			s.what = "release " + id
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				if !m.gone[id] {
					m.released[id], m.told[id] = true, false
					m.signal(env, api.SignalSlotRelease, id)
				}
			}
		case "gone":
			s.what = id + " terminated"
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.gone[id] = true }
		case "sweep":
			s.at = tl.own()
			s.what = "sweep"
			s.do = m.sweep
		case "continue-as-new":
			s = continueAsNewStep(tl)
		}
		steps = append(steps, s)
	}
	return steps
}

// sweep is the leader's sweep (app.ReleaseGoneSlots): a slot held by a migration that is gone is
// released.
func (m *limiterModel) sweep(env *testsuite.TestWorkflowEnvironment) {
	var st migrationplan.SlotState
	if ok, _ := query(env, &st); !ok {
		return
	}
	for _, h := range st.Holders {
		if m.gone[h.ID] {
			m.released[h.ID], m.told[h.ID] = true, false
			m.signal(env, api.SignalSlotRelease, h.ID)
		}
	}
}

// checkLimiter holds the limiter's state to its caps after a step.
func (m *limiterModel) checkLimiter(env *testsuite.TestWorkflowEnvironment, after string) {
	m.stepped(env, after)
	var st migrationplan.SlotState
	if !m.look(env, after, &st) {
		return
	}
	m.note("  holders %v, queue %d", holderIDs(st.Holders), len(st.Queue))
	onNode := map[string]int{}
	for _, h := range st.Holders {
		onNode[h.Node]++
		if onNode[h.Node] > m.perNode {
			m.violate("%d slots held on %s, over its cap of %d", onNode[h.Node], h.Node, m.perNode)
		}
	}
	if len(st.Holders) > m.clusterWide {
		m.violate("%d slots held, over the cluster's cap of %d", len(st.Holders), m.clusterWide)
	}
	// Every migration told it holds a slot, and that has not released it, is a holder: a slot the
	// limiter forgot would let more migrations run than the caps allow.
	held := map[string]bool{}
	for _, h := range st.Holders {
		held[h.ID] = true
	}
	for id, told := range m.told {
		// (A migration that is gone loses its slot when the limiter next fails to reach it.)
		if told && !m.gone[id] && !held[id] {
			m.violate("%s was told it holds a slot, but the limiter lists no such holder", id)
		}
	}
}

func holderIDs(hs []migrationplan.SlotRequest) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.ID)
	}
	return out
}

// TestSimulateMigrationLimiter runs generated sequences of slot requests (retried ones included)
// from up to 8 migrations on up to 3 nodes, releases, migrations that are terminated while they
// wait or hold a slot, the leader's sweep of gone holders, and continue-as-new through the limiter,
// holding it to: never more holders on a node or in the cluster than the caps; a migration told it
// holds a slot is a holder; at the end, once every gone holder was swept, no slot is held by a
// migration that is gone or that released it.
func TestSimulateMigrationLimiter(t *testing.T) { simulate(t, 300, limiterProperty) }

func limiterProperty(rt *rapid.T) {
	m := &limiterModel{perNode: rapid.IntRange(1, 2).Draw(rt, "perNode"), clusterWide: rapid.IntRange(1, 4).Draw(rt, "clusterWide"),
		node: map[string]string{}, told: map[string]bool{}, released: map[string]bool{}, gone: map[string]bool{}}
	steps := limiterSteps(rt, m)
	newEnv := quietEnv(func(env *testsuite.TestWorkflowEnvironment) {
		env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalSlotGranted, mock.Anything).Return(
			func(_, id, _, _ string, _ any) error {
				if m.gone[id] {
					return errors.New("workflow not found")
				}
				m.told[id], m.released[id] = true, false
				m.note("  told %s at %s", id, env.Now().Format("15:04:05"))
				return nil
			}).Maybe()
	})
	// A final sweep after everything, then a look at what is held.
	last := steps[len(steps)-1].at + 2*time.Second
	var final migrationplan.SlotState
	steps = append(steps, step{at: last, what: "final sweep", do: m.sweep}, step{at: last + time.Second, what: "final look", do: func(env *testsuite.TestWorkflowEnvironment) { _, _ = query(env, &final) }})
	if err := segments(rt, &m.carrier, MigrationLimiterWorkflow, api.LimiterInput{}, false, last+time.Minute, steps, newEnv, m.checkLimiter); err != nil {
		m.violate("the workflow failed: %v", err)
	}
	for _, h := range final.Holders {
		switch {
		case m.gone[h.ID]:
			m.violate("%s holds a slot after it was gone and swept: a leak", h.ID)
		case m.released[h.ID]:
			m.violate("%s holds a slot it released", h.ID)
		case !m.told[h.ID]:
			m.violate("%s holds a slot it was never told of", h.ID)
		}
	}
	m.fail(rt)
}
