package workflows

import (
	"context"
	"errors"
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// rolloutModel is the cluster a rollout changes: each node's owner (the plugin or DRA) and the
// owner it had before the first switch, the bound claims that keep a node on DRA, each phase's
// admission block, what its gates would measure, and faults to inject.
type rolloutModel struct {
	carrier
	simLog
	mu       sync.Mutex
	plan     rolloutplan.Plan
	env      *testsuite.TestWorkflowEnvironment
	owner    map[string]string // node -> "plugin" or "dra"
	claims   map[string]bool   // node -> a bound claim keeps it on DRA
	blocked  map[string]bool   // phase -> new claims of its classes refused
	enabled  map[string]time.Time
	approved map[string]bool // phase -> an approval was accepted while it waited
	gates    string          // "pass", "fail" or "nodata"
	// proof is what the next enforcement proof finds: "pass", "fail", "timeout" (its loads do
	// not finish) or "lost" (a load's result is lost). proofBlock: the phase's block lets the
	// proof's namespace through (tenants wait for the proof); proven: the phase's last proof
	// since its enable passed; softOK: a person approved the phase after its last failed proof.
	proof      string
	proofBlock map[string]bool
	proven     map[string]bool
	softOK     map[string]bool
	badNodes   bool // preflight finds nodes owned twice
	// faults: the next calls fail, and may be retried; forbidden: the next fails for good; lost:
	// the next enable or undo acts, then fails.
	faults          int
	forbidden, lost bool
	updates         []*simUpdate
}

// fault injects the next fault before a call acts.
func (m *rolloutModel) fault(name string) error {
	switch {
	case m.forbidden:
		m.forbidden = false
		m.note("  %s forbidden", name)
		return temporal.NewNonRetryableApplicationError("nodes is forbidden", rollouts.ErrRolloutForbidden, nil)
	case m.faults > 0:
		m.faults--
		m.note("  %s failed", name)
		return errors.New("etcdserver: request timed out")
	}
	m.note("  %s", name)
	return nil
}

// loseResult says whether the call that just acted loses its result.
func (m *rolloutModel) loseResult() error {
	if !m.lost {
		return nil
	}
	m.lost = false
	m.note("  (result lost)")
	return errors.New("connection reset after the write")
}

func (m *rolloutModel) nodes(phase string) []string {
	var out []string
	for n := range m.owner {
		if strings.HasPrefix(n, phase+"-") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (m *rolloutModel) activities(env *testsuite.TestWorkflowEnvironment) {
	m.env = env
	registerActivities(env)
	on := func(name string, fn any) { env.OnActivity(name, mock.Anything, mock.Anything).Return(fn).Maybe() }
	on("RolloutPreflight", func(_ context.Context, in rollouts.PhaseInput) ([]rolloutplan.Violation, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.fault("RolloutPreflight"); err != nil {
			return nil, err
		}
		if m.badNodes {
			return []rolloutplan.Violation{{Node: m.nodes(in.Plan.Phases[in.Phase].Name)[0], Reason: "owned by both"}}, nil
		}
		return nil, nil
	})
	on("UnblockNewClaims", func(_ context.Context, in api.BlockInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.fault("UnblockNewClaims " + in.Phase); err != nil {
			return err
		}
		if m.proofBlock[in.Phase] && !m.proven[in.Phase] && !m.softOK[in.Phase] {
			m.violate("shared phase %s opened to tenants without a passing proof or a recorded approval", in.Phase)
		}
		m.blocked[in.Phase], m.proofBlock[in.Phase] = false, false
		return nil
	})
	on("EnableRolloutPhase", func(_ context.Context, in rollouts.PhaseInput) (rolloutplan.PhaseChange, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		ph := in.Plan.Phases[in.Phase]
		if m.blocked[ph.Name] && !m.proofBlock[ph.Name] {
			m.violate("phase %s enabled while its admission block stands", ph.Name)
		}
		if ph.Enforcement != nil && !(m.blocked[ph.Name] && m.proofBlock[ph.Name]) {
			m.violate("shared phase %s enabled with its tenants let in before its proof", ph.Name)
		}
		if in.Phase > 0 {
			if prev := in.Plan.Phases[in.Phase-1]; prev.Approve && !m.approved[prev.Name] {
				m.violate("phase %s enabled with %s not approved", ph.Name, prev.Name)
			}
		}
		if err := m.fault("EnableRolloutPhase " + ph.Name); err != nil {
			return rolloutplan.PhaseChange{}, err
		}
		ch := rolloutplan.PhaseChange{Phase: ph.Name}
		for _, n := range m.nodes(ph.Name) {
			// Idempotent: a node switched already keeps the owner recorded at its first switch.
			m.owner[n] = "dra"
			ch.Nodes = append(ch.Nodes, rolloutplan.NodeChange{Node: n, Previous: "plugin", HadLabel: true, PluginDevices: 8})
		}
		m.enabled[ph.Name] = m.env.Now()
		m.proven[ph.Name], m.softOK[ph.Name] = false, false
		return ch, m.loseResult()
	})
	on("EvaluateRolloutGates", func(_ context.Context, in api.GateInput) (rolloutplan.Report, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		ph := in.Plan.Phases[in.Phase]
		if at, ok := m.enabled[ph.Name]; !ok || m.env.Now().Before(at.Add(ph.Soak.D())) {
			m.violate("gates of %s measured before its soak ended (enabled %v)", ph.Name, at)
		}
		if err := m.fault("EvaluateRolloutGates " + ph.Name); err != nil {
			return rolloutplan.Report{}, err
		}
		rep := rolloutplan.Report{Phase: ph.Name, Claims: 3}
		switch m.gates {
		case "fail":
			rep.Failed = []string{"drift"}
		case "nodata":
			rep.Claims, rep.Waiting = 0, []string{"no claims of the phase's classes yet"}
		}
		return rep, nil
	})
	on("BlockNewClaims", func(_ context.Context, in api.BlockInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.fault("BlockNewClaims " + in.Phase); err != nil {
			return err
		}
		m.blocked[in.Phase], m.proofBlock[in.Phase] = true, in.Except != ""
		return nil
	})
	on("ProveEnforcement", func(_ context.Context, in rollouts.PhaseInput) ([]rolloutplan.ProofReport, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		ph := in.Plan.Phases[in.Phase]
		if !m.blocked[ph.Name] || !m.proofBlock[ph.Name] {
			m.violate("phase %s proved with its tenants let in", ph.Name)
		}
		if m.owner[m.nodes(ph.Name)[0]] != "dra" {
			m.violate("phase %s proved before its nodes were switched", ph.Name)
		}
		if err := m.fault("ProveEnforcement " + ph.Name + " (" + m.proof + ")"); err != nil {
			return nil, err
		}
		m.proven[ph.Name], m.softOK[ph.Name] = m.proof == "pass", false
		rep := rolloutplan.ProofReport{Phase: ph.Name, Node: m.nodes(ph.Name)[0], Baseline: rolloutplan.LoadResult{Throughput: 1000, P99Ms: 10},
			Tenants: []rolloutplan.TenantFigures{{Pod: "noisy", Role: rolloutplan.RoleNoisy, Fraction: 0.2, Expected: 200, Result: rolloutplan.LoadResult{Throughput: 200, P99Ms: 10}}}}
		switch m.proof {
		case "fail":
			rep.Tenants[0].Result.Throughput = 700
		case "timeout":
			return nil, errors.New("1 of 3 load Pods had not finished: context deadline exceeded")
		case "lost":
			return nil, errors.New("load Pod proof/x ended Failed with no result in its termination message")
		}
		rep.Judge()
		return []rolloutplan.ProofReport{rep}, nil
	})
	on("MarkClassIsolation", func(_ context.Context, in rollouts.IsolationInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.fault(fmt.Sprintf("MarkClassIsolation %v soft %v", in.Classes, in.Soft))
	})
	on("UndoRolloutPhase", func(_ context.Context, in rollouts.UndoInput) (rollouts.UndoResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.blocked[in.Change.Phase] {
			m.violate("phase %s routed back before new claims of its classes were refused", in.Change.Phase)
		}
		if err := m.fault("UndoRolloutPhase " + in.Change.Phase); err != nil {
			return rollouts.UndoResult{}, err
		}
		var res rollouts.UndoResult
		nodes := in.Change.Nodes
		if in.Change.Partial && len(nodes) == 0 {
			if in.Selector == "" {
				m.violate("a partial change of %s undone without its node selector", in.Change.Phase)
			}
			for _, n := range m.nodes(in.Change.Phase) {
				if m.owner[n] == "dra" { // the enable recorded its previous owner
					nodes = append(nodes, rolloutplan.NodeChange{Node: n, Previous: "plugin", HadLabel: true, PluginDevices: 8})
				}
			}
		}
		for _, c := range nodes {
			if m.claims[c.Node] && m.owner[c.Node] == "dra" {
				res.Held = append(res.Held, rollouts.HeldNode{NodeChange: c, Claims: 1})
				continue
			}
			m.owner[c.Node] = c.Previous
			res.Returned = append(res.Returned, c.Node)
		}
		return res, m.loseResult()
	})
	on("Alert", func(context.Context, notify.AlertInput) error { return nil })
	on("RequestRolloutApproval", func(context.Context, notify.RolloutApprovalRequest) error { return nil })
}

func rolloutSteps(rt *rapid.T, m *rolloutModel) []step {
	n := rapid.IntRange(1, 30).Draw(rt, "steps")
	var steps []step
	tl := &timeline{at: time.Second}
	var nodes []string
	for n := range m.owner {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for i := range n {
		gap := rapid.SampledFrom([]time.Duration{0, time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute}).Draw(rt, fmt.Sprintf("gap%d", i))
		s := step{at: tl.next(gap)}
		switch rapid.SampledFrom([]string{"command", "command", "command", "gates", "proof", "claims", "fault", "preflight", "continue-as-new"}).Draw(rt, fmt.Sprintf("kind%d", i)) {
		case "proof":
			o := rapid.SampledFrom([]string{"pass", "fail", "timeout", "lost"}).Draw(rt, fmt.Sprintf("proof%d", i))
			s.what = "the proof would find " + o
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.proof = o; m.mu.Unlock() }
		case "command":
			name := rapid.SampledFrom([]string{api.UpdateRolloutPause, api.UpdateRolloutResume, api.UpdateRolloutRollback, api.UpdateRolloutApprove, api.UpdateRolloutApprove}).Draw(rt, fmt.Sprintf("cmd%d", i))
			c := rolloutplan.Command{Actor: rapid.SampledFrom([]string{simActor, simActor, simActor, ""}).Draw(rt, fmt.Sprintf("actor%d", i)), Reason: "simulated"}
			if name == api.UpdateRolloutApprove {
				c.Phase = rapid.SampledFrom([]string{"canary", "canary", "wide"}).Draw(rt, fmt.Sprintf("phase%d", i))
			}
			s.what = fmt.Sprintf("%s %s by %q", name, c.Phase, c.Actor)
			s.do = func(env *testsuite.TestWorkflowEnvironment) { m.update(env, name, s.what, c) }
		case "gates":
			g := rapid.SampledFrom([]string{"pass", "fail", "nodata"}).Draw(rt, fmt.Sprintf("gates%d", i))
			s.what = "the gates would measure " + g
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.gates = g; m.mu.Unlock() }
		case "claims":
			node := rapid.SampledFrom(nodes).Draw(rt, fmt.Sprintf("node%d", i))
			bound := rapid.Bool().Draw(rt, fmt.Sprintf("bound%d", i))
			s.what = fmt.Sprintf("claims bound on %s: %v", node, bound)
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.claims[node] = bound; m.mu.Unlock() }
		case "fault":
			f := rapid.SampledFrom([]string{"transient", "forbidden", "lost"}).Draw(rt, fmt.Sprintf("fault%d", i))
			k := rapid.IntRange(1, 3).Draw(rt, fmt.Sprintf("faults%d", i))
			s.what = fmt.Sprintf("fault: %s (%d)", f, k)
			s.do = func(*testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				defer m.mu.Unlock()
				switch f {
				case "transient":
					m.faults = k
				case "forbidden":
					m.forbidden = true
				case "lost":
					m.lost = true
				}
			}
		case "preflight":
			bad := rapid.Bool().Draw(rt, fmt.Sprintf("bad%d", i))
			s.what = fmt.Sprintf("preflight finds nodes owned twice: %v", bad)
			s.do = func(*testsuite.TestWorkflowEnvironment) { m.mu.Lock(); m.badNodes = bad; m.mu.Unlock() }
		case "continue-as-new":
			s = continueAsNewStep(tl)
		}
		steps = append(steps, s)
	}
	return steps
}

// update sends a command and records how it is answered; an approval accepted marks its phase.
func (m *rolloutModel) update(env *testsuite.TestWorkflowEnvironment, name, what string, c rolloutplan.Command) {
	u := &simUpdate{what: what}
	m.updates = append(m.updates, u)
	sendUpdate(env, name, c, u, func() {
		if name == api.UpdateRolloutApprove {
			m.mu.Lock()
			m.approved[c.Phase] = true
			m.softOK[c.Phase] = m.proofBlock[c.Phase]
			m.mu.Unlock()
		}
	}, nil)
}

// checkRollout holds the rollout's state to the cluster after a step.
func (m *rolloutModel) checkRollout(env *testsuite.TestWorkflowEnvironment, after string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stepped(env, after)
	m.checkRefusals(m.updates)
	var st api.RolloutStatus
	if !m.look(env, after, &st) {
		return
	}
	m.note("  phase %d step %s state %s paused %v enabled %d draining %d", st.Phase, st.Step, st.State, st.Paused, len(st.Enabled), len(st.Draining))
	m.checkOwners(st, false)
}

// checkOwners holds what the rollout lists to the nodes' owners: no node listed both enabled and
// draining, none listed that the plugin owns; settled (nothing under way), every node DRA owns
// is listed.
func (m *rolloutModel) checkOwners(st api.RolloutStatus, settled bool) {
	listed := map[string]string{}
	list := func(n, as string) {
		if was, ok := listed[n]; ok {
			m.violate("node %s listed %s and %s", n, was, as)
		}
		listed[n] = as
	}
	for _, ch := range st.Enabled {
		for _, c := range ch.Nodes {
			list(c.Node, "enabled")
		}
	}
	for _, d := range st.Draining {
		for _, c := range d.Change.Nodes {
			list(c.Node, "draining")
		}
	}
	if !settled {
		return
	}
	// What a call that failed after acting did, the rollout cannot know; it says so, and a resume
	// or a rollback finishes the step: a rollback that did not finish (its phases' nodes may be
	// back with the plugin), an enable that failed (a partial change: its nodes may be on DRA).
	unsure := map[string]bool{}
	if u := st.Unfinished; u != nil {
		for _, ch := range st.Enabled[max(0, len(st.Enabled)-u.Phases):] {
			unsure[ch.Phase] = true
		}
	}
	for _, ch := range st.Enabled {
		unsure[ch.Phase] = unsure[ch.Phase] || ch.Partial
	}
	phaseOf := func(n string) string { return strings.SplitN(n, "-", 2)[0] }
	for n, as := range listed {
		if m.owner[n] != "dra" && !unsure[phaseOf(n)] {
			m.violate("node %s listed %s, but the plugin owns it", n, as)
		}
	}
	for n, o := range m.owner {
		if o == "dra" && listed[n] == "" && !unsure[phaseOf(n)] {
			m.violate("node %s is on DRA, but the rollout (%s) lists it neither enabled nor draining", n, st.State)
		}
	}
}

// TestSimulateRollout runs generated sequences through a two-phase rollout (the first needs an
// approval, the second makes its class shared and must prove enforcement, a failed proof rolling
// it back or waiting for a person): pause, resume, rollback and approve commands (signed, unsigned,
// for the wrong phase, refused by the state), proofs that pass, fail, time out or lose their
// result, gates that pass, fail or find no data, bound claims that keep nodes on
// DRA, preflights that find nodes owned twice, failing calls (retried, forbidden, or acting and
// losing their result) and continue-as-new, holding it to: a phase enabled only with its admission
// block lifted and the phase before it approved; a shared phase enabled and proved only while
// its tenants are refused, and opened to them only after a passing proof or a person's approval; gates measured only after the soak; nodes routed
// back only after new claims are refused; no node listed both enabled and draining, or listed on
// DRA while the plugin owns it; every refused command says why and every accepted one is
// answered; the query answers; and once settled, every node on DRA is one the rollout lists.
func TestSimulateRollout(t *testing.T) {
	simulate(t, 300, rolloutProperty)
	t.Logf("settled: %v", rolloutEnds)
}

func rolloutProperty(rt *rapid.T) {
	p := testPlan()
	// The second phase makes its class shared: tenants get it only after an enforcement proof, or
	// a person's approval where the plan allows one.
	p.Phases[1].Classes[0].Shared = true
	p.Phases[1].Enforcement = sharedPlan(rapid.SampledFrom([]string{rolloutplan.UnenforcedWholeDevice, rolloutplan.UnenforcedApprove}).Draw(rt, "onUnenforced")).Phases[0].Enforcement
	m := &rolloutModel{plan: p, owner: map[string]string{}, claims: map[string]bool{}, blocked: map[string]bool{},
		enabled: map[string]time.Time{}, approved: map[string]bool{}, gates: "pass", proof: "pass",
		proofBlock: map[string]bool{}, proven: map[string]bool{}, softOK: map[string]bool{}}
	for _, n := range []string{"canary-0", "wide-0", "wide-1"}[:rapid.IntRange(2, 3).Draw(rt, "nodes")] {
		m.owner[n] = "plugin"
	}
	steps := rolloutSteps(rt, m)
	last := steps[len(steps)-1].at
	// Settled: some time after the last step with nothing failing and no claim bound, two looks a
	// second apart. A look in the instant an activity ran may see the cluster changed and the
	// state not yet, so the owners are checked only when both looks find the rollout at rest (a
	// state in which no step is under way) and the same, against the owners at the second.
	var first, final api.RolloutStatus
	var owners map[string]string
	looked := false
	snapshot := func() map[string]string {
		m.mu.Lock()
		defer m.mu.Unlock()
		out := map[string]string{}
		for n, o := range m.owner {
			out[n] = o
		}
		return out
	}
	steps = append(steps,
		step{at: last + time.Second, what: "faults end, claims released", do: func(*testsuite.TestWorkflowEnvironment) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.faults, m.forbidden, m.lost, m.claims, m.proof = 0, false, false, map[string]bool{}, "pass"
		}},
		step{at: last + 30*time.Minute, what: "first settled look", do: func(env *testsuite.TestWorkflowEnvironment) { _, _ = query(env, &first) }},
		step{at: last + 30*time.Minute + time.Second, what: "second settled look", do: func(env *testsuite.TestWorkflowEnvironment) {
			owners = snapshot()
			ok, err := query(env, &final)
			looked = ok && err == nil && atRest(first, final)
		}})
	m.ended = func(env *testsuite.TestWorkflowEnvironment) {
		if env.GetWorkflowError() == nil {
			looked, owners = env.GetWorkflowResult(&final) == nil, snapshot()
		}
	}
	if err := segments(rt, &m.carrier, RolloutWorkflow, api.RolloutInput{Plan: p}, false, last+31*time.Minute, steps, quietEnv(m.activities), m.checkRollout); err != nil {
		m.violate("the workflow failed: %v", err)
	}
	// An activity the environment still retries after the run ended may touch the model: the end
	// is judged under its lock.
	m.mu.Lock()
	defer m.mu.Unlock()
	if final.State != rolloutplan.StateCompleted {
		m.checkAnswered(m.updates)
	}
	if looked {
		m.note("settled: %s, enabled %d, draining %d", final.State, len(final.Enabled), len(final.Draining))
		m.owner = owners
		m.checkOwners(final, true)
	}
	rolloutEnds[string(final.State)]++
	m.fail(rt)
}

// atRest says two looks found the rollout in the same state, one in which no step is under way.
func atRest(a, b api.RolloutStatus) bool {
	switch b.State {
	case rolloutplan.StateRunning, rolloutplan.StateBlocking:
		return false
	}
	return a.State == b.State && a.Phase == b.Phase && a.Step == b.Step && len(a.Enabled) == len(b.Enabled) && len(a.Draining) == len(b.Draining)
}

// rolloutEnds counts the states the simulated rollouts settled in.
var rolloutEnds = map[string]int{}
