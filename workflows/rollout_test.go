package workflows

import (
	"context"
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

func testPlan() rolloutplan.Plan {
	return rolloutplan.Plan{Name: "gpu", OwnerLabel: rolloutplan.DefaultOwnerLabel, Plugin: "plugin", DRA: "dra", PluginResource: "x.io/gpu",
		RollbackHold: policy.JSONDuration(time.Hour),
		Phases: []rolloutplan.Phase{
			{Name: "canary", Nodes: "pool=a", Classes: []rolloutplan.Class{{Name: "gpu-a", Driver: "drv"}}, Namespaces: []string{"canary"},
				Soak: policy.JSONDuration(10 * time.Minute), Approve: true},
			{Name: "wide", Nodes: "pool=b", Classes: []rolloutplan.Class{{Name: "gpu-b", Driver: "drv"}}, Namespaces: []string{"team"},
				Soak: policy.JSONDuration(20 * time.Minute)},
		}}
}

// rolloutEnv is a test environment with the rollout's activities mocked: every phase passes
// preflight and its gates unless a test says otherwise.
type rolloutEnv struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment
	// calls lists the activities run, "Name:phase".
	calls []string
	// held is how many undo calls find the node held by a bound claim.
	held int
	// answers are the accepted updates' answers, by update name.
	answers map[string]api.RolloutStatus
}

func newRolloutEnv(t *testing.T) *rolloutEnv {
	return newRolloutEnvWithAlert(t, func(context.Context, notify.AlertInput) error { return nil })
}

// newRolloutEnvWithAlert is newRolloutEnv with the Alert activity answered by alert.
func newRolloutEnvWithAlert(t *testing.T, alert func(context.Context, notify.AlertInput) error) *rolloutEnv {
	var s testsuite.WorkflowTestSuite
	r := &rolloutEnv{t: t, env: s.NewTestWorkflowEnvironment()}
	r.env.RegisterWorkflow(RolloutWorkflow)
	registerActivities(r.env)
	r.env.OnActivity(rem.Alert, mock.Anything, mock.Anything).Return(alert).Maybe()
	r.env.OnActivity(rol.RequestRolloutApproval, mock.Anything, mock.Anything).Return(func(_ context.Context, in notify.RolloutApprovalRequest) error {
		r.record("ask", in.Phase+">"+in.Next)
		return nil
	}).Maybe()
	return r
}

func (r *rolloutEnv) record(name string, phase string) { r.calls = append(r.calls, name+":"+phase) }

func (r *rolloutEnv) preflight(violations func(phase int) []rolloutplan.Violation) {
	r.env.OnActivity(rol.RolloutPreflight, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.PhaseInput) ([]rolloutplan.Violation, error) {
		r.record("preflight", in.Plan.Phases[in.Phase].Name)
		return violations(in.Phase), nil
	})
}

func (r *rolloutEnv) enable() {
	r.env.OnActivity(rol.EnableRolloutPhase, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.PhaseInput) (rolloutplan.PhaseChange, error) {
		ph := in.Plan.Phases[in.Phase].Name
		r.record("enable", ph)
		return rolloutplan.PhaseChange{Phase: ph, Nodes: []rolloutplan.NodeChange{{Node: ph + "-0", Previous: "plugin", HadLabel: true, PluginDevices: 8}}}, nil
	})
}

func (r *rolloutEnv) gates(failed func(phase int, attempt int) []string) {
	attempts := map[int]int{}
	r.env.OnActivity(rol.EvaluateRolloutGates, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.GateInput) (rolloutplan.Report, error) {
		ph := in.Plan.Phases[in.Phase].Name
		r.record("gates", ph)
		if in.Expected[ph+"-0"] != 8 {
			r.t.Errorf("gates of %s: expected devices %v, want what enable recorded", ph, in.Expected)
		}
		attempts[in.Phase]++
		return rolloutplan.Report{Phase: ph, Claims: 3, Failed: failed(in.Phase, attempts[in.Phase])}, nil
	})
}

func (r *rolloutEnv) rollbackActs() {
	r.env.OnActivity(rol.BlockNewClaims, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.BlockInput) error {
		if in.Except != "" { // a proof's block: tenants wait, the proof's namespace may claim
			r.record("block", in.Phase+" but "+in.Except)
			return nil
		}
		r.record("block", in.Phase+"="+strings.Join(in.Classes, ","))
		return nil
	}).Maybe()
	r.env.OnActivity(rol.UndoRolloutPhase, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.UndoInput) (rollouts.UndoResult, error) {
		r.record("undo", in.Change.Phase+"="+in.Change.Nodes[0].Previous)
		if r.held > 0 {
			r.held--
			return rollouts.UndoResult{Held: []rollouts.HeldNode{{NodeChange: in.Change.Nodes[0], Claims: 1}}}, nil
		}
		return rollouts.UndoResult{Returned: []string{in.Change.Nodes[0].Node}}, nil
	}).Maybe()
	r.env.OnActivity(rol.UnblockNewClaims, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.BlockInput) error {
		r.record("unblock", in.Phase)
		return nil
	}).Maybe()
}

// update sends a command at d into the run; wantOK says whether it must be accepted.
func (r *rolloutEnv) update(d time.Duration, name string, c rolloutplan.Command, wantOK bool) {
	r.env.RegisterDelayedCallback(func() {
		r.env.UpdateWorkflow(name, name+c.Phase+c.Actor+d.String(), &testsuite.TestUpdateCallback{OnAccept: func() {
			if !wantOK {
				r.t.Errorf("%s %+v accepted", name, c)
			}
		}, OnReject: func(err error) {
			if wantOK {
				r.t.Errorf("%s %+v refused: %v", name, c, err)
			}
		}, OnComplete: func(v any, err error) {
			if st, ok := v.(api.RolloutStatus); ok && err == nil {
				if r.answers == nil {
					r.answers = map[string]api.RolloutStatus{}
				}
				r.answers[name] = st
			}
		}}, c)
	}, d)
}

// stateAt queries the rollout's state at d into the status it returns.
func (r *rolloutEnv) stateAt(d time.Duration) *api.RolloutStatus {
	st := &api.RolloutStatus{}
	r.env.RegisterDelayedCallback(func() {
		v, err := r.env.QueryWorkflow(api.QueryState)
		if err == nil {
			err = v.Get(st)
		}
		if err != nil {
			r.t.Errorf("state at %s: %v", d, err)
		}
	}, d)
	return st
}

// heldRollback is a one-phase rollout whose gates fail, with the given rollbackHold, whose node
// bound claims hold for the first held undo calls.
func heldRollback(t *testing.T, hold time.Duration, held int) (*rolloutEnv, rolloutplan.Plan) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases = p.Phases[:1]
	p.RollbackHold = policy.JSONDuration(hold)
	r.held = held
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.rollbackActs()
	r.gates(func(int, int) []string { return []string{"drift"} })
	return r, p
}

// countLog counts the rollout's log entries that contain text.
func countLog(st api.RolloutStatus, text string) int {
	n := 0
	for _, e := range st.Log {
		if strings.Contains(e.Text, text) {
			n++
		}
	}
	return n
}

func (r *rolloutEnv) run(in api.RolloutInput) api.RolloutStatus {
	r.env.ExecuteWorkflow(RolloutWorkflow, in)
	if !r.env.IsWorkflowCompleted() {
		r.t.Fatal("rollout did not complete")
	}
	if err := r.env.GetWorkflowError(); err != nil {
		r.t.Fatal(err)
	}
	var st api.RolloutStatus
	if err := r.env.GetWorkflowResult(&st); err != nil {
		r.t.Fatal(err)
	}
	return st
}

func (r *rolloutEnv) wantCalls(want ...string) {
	r.t.Helper()
	if strings.Join(r.calls, " ") != strings.Join(want, " ") {
		r.t.Errorf("calls:\n got %v\nwant %v", r.calls, want)
	}
}

func TestRolloutAdvancesThroughApprovedPhases(t *testing.T) {
	r := newRolloutEnv(t)
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.gates(func(int, int) []string { return nil })
	r.update(5*time.Minute, api.UpdateRolloutApprove, rolloutplan.Command{Actor: "sre", Phase: "canary"}, false) // still soaking
	r.update(11*time.Minute, api.UpdateRolloutApprove, rolloutplan.Command{Actor: "sre", Phase: "wide"}, false)  // not the one waiting
	r.update(12*time.Minute, api.UpdateRolloutApprove, rolloutplan.Command{Phase: "canary"}, false)              // no actor
	r.update(13*time.Minute, api.UpdateRolloutApprove, rolloutplan.Command{Actor: "sre", Phase: "canary"}, true)
	atApproval := r.stateAt(12*time.Minute + 30*time.Second)
	st := r.run(api.RolloutInput{Plan: testPlan()})
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "ask:canary>wide", "preflight:wide", "enable:wide", "gates:wide")
	if st.State != rolloutplan.StateCompleted || st.Phase != 2 || len(st.Enabled) != 2 || len(st.Reports) != 2 {
		t.Errorf("status = %+v", st)
	}
	if a := r.answers[api.UpdateRolloutApprove]; a.State == rolloutplan.StateWaitingApproval || a.Phase != 1 {
		t.Errorf("the approval answered %s at phase %d: it must answer once the rollout moved on", a.State, a.Phase)
	}
	if atApproval.State != rolloutplan.StateWaitingApproval || atApproval.Awaiting != "canary" {
		t.Errorf("at 12m30s: state %s awaiting %q, want waiting-approval on canary", atApproval.State, atApproval.Awaiting)
	}
	if !strings.Contains(st.Log[len(st.Log)-1].Text, "completed") || !hasLog(st, "approve-phase by sre (phase canary)") {
		t.Errorf("log = %+v", st.Log)
	}
}

func TestRolloutFailedGateRollsBackThePhaseAndResumeRetries(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases[0].Approve = false
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.rollbackActs()
	r.gates(func(phase, attempt int) []string {
		if phase == 1 && attempt == 1 {
			return []string{"claim->allocated p99: 40s, the gate allows 15s"}
		}
		return nil
	})
	// wide soaks 10..30 min, fails, is rolled back; resume at 40 min retries it.
	r.update(35*time.Minute, api.UpdateRolloutPause, rolloutplan.Command{Actor: "sre"}, false)
	r.update(40*time.Minute, api.UpdateRolloutResume, rolloutplan.Command{Actor: "sre", Reason: "publisher fixed"}, true)
	st := r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "preflight:wide", "enable:wide", "gates:wide",
		"block:wide=gpu-b", "undo:wide=plugin", "preflight:wide", "unblock:wide", "enable:wide", "gates:wide")
	if st.State != rolloutplan.StateCompleted || len(st.Blocks) != 0 || len(st.Enabled) != 2 {
		t.Errorf("status = %+v", st)
	}
}

func TestRolloutRollbackCommandUndoesEveryPhaseNewestFirst(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases[0].Approve = false
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.rollbackActs()
	r.gates(func(int, int) []string { return nil })
	r.update(time.Minute, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "sre"}, true)              // during canary's soak... (accepted)
	r.update(time.Minute+time.Second, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "sre"}, false) // already under way
	st := r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:canary", "enable:canary", "block:canary=gpu-a", "undo:canary=plugin")
	if st.State != rolloutplan.StateRolledBack || len(st.Enabled) != 0 || len(st.Blocks) != 1 || st.Phase != 0 {
		t.Errorf("status = %+v", st)
	}
	if !strings.Contains(st.Log[len(st.Log)-1].Text, "ends rolled back") {
		t.Errorf("last log entry = %q", st.Log[len(st.Log)-1].Text)
	}

	r = newRolloutEnv(t)
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.rollbackActs()
	r.gates(func(int, int) []string { return nil })
	// wide is soaking at 25 min: both phases go back, wide first.
	r.update(25*time.Minute, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "sre", Reason: "tenant complaints"}, true)
	st = r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "preflight:wide", "enable:wide",
		"block:wide=gpu-b", "undo:wide=plugin", "block:canary=gpu-a", "undo:canary=plugin")
	if a := r.answers[api.UpdateRolloutRollback]; a.RollbackPending != nil || len(a.Enabled) != 0 {
		t.Errorf("the rollback answered before it was carried out: %+v", a)
	}
	if st.State != rolloutplan.StateRolledBack || len(st.Blocks) != 2 || st.Phase != 0 {
		t.Errorf("status = %+v", st)
	}
}

func TestRolloutBlockedAtPreflightUntilResumed(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases = p.Phases[:1]
	tries := 0
	r.preflight(func(int) []rolloutplan.Violation {
		tries++
		if tries == 1 {
			return []rolloutplan.Violation{{Node: "a-0", Reason: "double ownership"}}
		}
		return nil
	})
	r.enable()
	r.gates(func(int, int) []string { return nil })
	r.update(time.Minute, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "sre"}, false) // nothing enabled
	blocked := r.stateAt(2 * time.Minute)
	r.update(3*time.Minute, api.UpdateRolloutResume, rolloutplan.Command{Actor: "sre"}, true)
	st := r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:canary", "preflight:canary", "enable:canary", "gates:canary")
	if blocked.State != rolloutplan.StateBlocked || len(blocked.Violations) != 1 || blocked.Violations[0].Node != "a-0" {
		t.Errorf("while blocked: %+v", blocked)
	}
	if st.State != rolloutplan.StateCompleted || len(st.Violations) != 0 {
		t.Errorf("status = %+v", st)
	}
}

func TestScheduledRolloutEnablesOnlyInsideAWindow(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases[0].Approve = false
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	var enabledAt []time.Duration
	start := r.env.Now()
	r.env.OnActivity(rol.EnableRolloutPhase, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.PhaseInput) (rolloutplan.PhaseChange, error) {
		enabledAt = append(enabledAt, r.env.Now().Sub(start))
		ph := in.Plan.Phases[in.Phase].Name
		return rolloutplan.PhaseChange{Phase: ph, Nodes: []rolloutplan.NodeChange{{Node: ph + "-0", PluginDevices: 8}}}, nil
	})
	r.gates(func(int, int) []string { return nil })
	window := func(at, length time.Duration) {
		r.env.RegisterDelayedCallback(func() {
			r.env.SignalWorkflow(api.SignalRolloutWindow, api.RolloutWindow{Until: r.env.Now().Add(length)})
		}, at)
	}
	// A window at 1 h for 5 min (canary enables, then soaks 10 min past it); the next at 3 h.
	window(time.Hour, 5*time.Minute)
	window(3*time.Hour, 5*time.Minute)
	st := r.run(api.RolloutInput{Plan: p, Scheduled: true})
	if len(enabledAt) != 2 || enabledAt[0] != time.Hour || enabledAt[1] != 3*time.Hour {
		t.Errorf("phases enabled at %v, want 1h and 3h", enabledAt)
	}
	if st.State != rolloutplan.StateCompleted {
		t.Errorf("status = %+v", st)
	}
}

// TestRolloutHoldsNodesWithBoundClaims: a node whose devices still back a claim stays on DRA after
// the rollback and goes back to the plugin once the claim is released (the third look here); the
// rollout ends only after that, past its rollbackHold.
func TestRolloutHoldsNodesWithBoundClaims(t *testing.T) {
	r, p := heldRollback(t, 20*time.Second, 2)
	during := r.stateAt(10*time.Minute + 5*time.Second)
	start := r.env.Now()
	st := r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "block:canary=gpu-a", "undo:canary=plugin", "undo:canary=plugin", "undo:canary=plugin")
	if len(during.Draining) != 1 || during.Draining[0].Change.Nodes[0].Node != "canary-0" || during.State != rolloutplan.StateRolledBack {
		t.Errorf("while held: %+v", during)
	}
	if st.State != rolloutplan.StateRolledBack || len(st.Draining) != 0 {
		t.Errorf("status = %+v", st)
	}
	// Soak 10 min, a look at 15 s, the last at 20 s when the hold has passed.
	if took := r.env.Now().Sub(start); took != 10*time.Minute+20*time.Second {
		t.Errorf("ended after %s", took)
	}
	if held := countLog(st, "held on DRA"); held != 1 {
		t.Errorf("held noted %d times, want once: %+v", held, st.Log)
	}
}

// TestRolloutWindowFailsWhenTheRolloutIsHeld: a window that finds the rollout rolled back or
// blocked fails (so the Schedule, created with pause-on-failure, pauses); otherwise it succeeds,
// and it asks for the window to last as long as the schedule says from its own start.
func TestRolloutWindowFailsWhenTheRolloutIsHeld(t *testing.T) {
	for state, wantErr := range map[rolloutplan.State]bool{rolloutplan.StateRunning: false, rolloutplan.StateWaitingWindow: false,
		rolloutplan.StateRolledBack: true, rolloutplan.StateBlocked: true, rolloutplan.StateCompleted: false} {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		env.RegisterWorkflow(RolloutWindowWorkflow)
		registerActivities(env)
		start := env.Now()
		var asked api.OpenWindowInput
		env.OnActivity(rol.OpenRolloutWindow, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.OpenWindowInput) (api.OpenWindowResult, error) {
			asked = in
			return api.OpenWindowResult{Phase: "canary", State: state}, nil
		})
		env.ExecuteWorkflow(RolloutWindowWorkflow, api.RolloutWindowInput{Plan: testPlan(), Window: policy.JSONDuration(2 * time.Hour)})
		err := env.GetWorkflowError()
		if (err != nil) != wantErr || wantErr && !strings.Contains(err.Error(), "schedule pauses") {
			t.Errorf("%s: error %v, want error %t", state, err, wantErr)
		}
		if asked.Plan.Name != "gpu" || !asked.Until.Equal(start.Add(2*time.Hour)) {
			t.Errorf("%s: asked %+v", state, asked)
		}
	}
}

func TestKeepLast(t *testing.T) {
	log := make([]api.RolloutEntry, 5)
	for i := range log {
		log[i].Text = fmt.Sprint(i)
	}
	if got := keepLast(log, 5); len(got) != 5 {
		t.Errorf("at the limit: %d", len(got))
	}
	if got := keepLast(log, 3); len(got) != 3 || got[0].Text != "2" {
		t.Errorf("past the limit: %+v", got)
	}
}

// TestRolloutBlockedLaterPhaseCanRollBack: blocked at the second phase's preflight with the first
// enabled, a rollback command ends the wait and undoes the first phase.
func TestRolloutBlockedLaterPhaseCanRollBack(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases[0].Approve = false
	r.preflight(func(phase int) []rolloutplan.Violation {
		if phase == 1 {
			return []rolloutplan.Violation{{Node: "b-0", Reason: "double ownership"}}
		}
		return nil
	})
	r.enable()
	r.rollbackActs()
	r.gates(func(int, int) []string { return nil })
	r.update(15*time.Minute, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "sre", Reason: "give up"}, true)
	st := r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:canary", "enable:canary", "gates:canary", "preflight:wide", "block:canary=gpu-a", "undo:canary=plugin")
	if st.State != rolloutplan.StateRolledBack || len(st.Enabled) != 0 || st.Phase != 0 {
		t.Errorf("status = %+v", st)
	}
	if !hasLog(st, "rollback by sre: give up") {
		t.Errorf("log = %+v", st.Log)
	}
}

// TestRolloutKeepsDrainingPastItsHold: a node still held when the hold runs out keeps the rollout
// open until it is routed back; it is noted once as held and once as back.
func TestRolloutKeepsDrainingPastItsHold(t *testing.T) {
	r, p := heldRollback(t, 30*time.Second, 3)
	start := r.env.Now()
	st := r.run(api.RolloutInput{Plan: p})
	// Held at the rollback (10 min), at 15 s and at 30 s (the hold's end); the looks back off
	// (15 s, 30 s, 60 s), so it is back at 90 s.
	if took := r.env.Now().Sub(start); took != 10*time.Minute+90*time.Second {
		t.Errorf("ended after %s", took)
	}
	if st.State != rolloutplan.StateRolledBack || len(st.Draining) != 0 {
		t.Errorf("status = %+v", st)
	}
	if held, back := countLog(st, "held on DRA"), countLog(st, "back with the plugin"); held != 1 || back != 1 {
		t.Errorf("held noted %d times, back %d times: %+v", held, back, st.Log)
	}
}

// TestRolloutPauseHoldsTheNextStep: a pause during a soak lets the soak run out but holds the
// gates until resume; the status says paused meanwhile and running after.
func TestRolloutPauseHoldsTheNextStep(t *testing.T) {
	r := newRolloutEnv(t)
	p := testPlan()
	p.Phases = p.Phases[:1]
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	var gatesAt time.Duration
	start := r.env.Now()
	r.env.OnActivity(rol.EvaluateRolloutGates, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.GateInput) (rolloutplan.Report, error) {
		gatesAt = r.env.Now().Sub(start)
		return rolloutplan.Report{Phase: "canary"}, nil
	})
	r.update(time.Minute, api.UpdateRolloutPause, rolloutplan.Command{Actor: "sre", Reason: "change freeze"}, true)
	paused := r.stateAt(15 * time.Minute)
	r.update(20*time.Minute, api.UpdateRolloutResume, rolloutplan.Command{Actor: "sre"}, true)
	resumed := r.stateAt(20*time.Minute + time.Second)
	st := r.run(api.RolloutInput{Plan: p})
	if paused.State != rolloutplan.StatePaused || !paused.Paused || paused.Step != rolloutplan.StepGates {
		t.Errorf("at 15 min: %+v", paused)
	}
	if gatesAt != 20*time.Minute {
		t.Errorf("gates ran at %s, want at the resume (20m)", gatesAt)
	}
	if resumed.Paused || st.State != rolloutplan.StateCompleted {
		t.Errorf("after resume: %+v; end %+v", resumed, st)
	}
	if !hasLog(st, "pause by sre: change freeze") {
		t.Errorf("log = %+v", st.Log)
	}
}

func hasLog(st api.RolloutStatus, text string) bool {
	for _, e := range st.Log {
		if e.Text == text {
			return true
		}
	}
	return false
}
