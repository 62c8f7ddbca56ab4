package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// RolloutWorkflow (ID "rollout/<plan name>") moves node pools from the device plugin to DRA, a
// phase at a time: preflight -> enable -> soak -> gates -> approve -> next. A failed gate rolls the
// phase back (new claims for its classes refused by an admission policy, nodes routed back to the
// plugin, running Pods and bound claims left alone) and waits for resume; a rollback command rolls
// back every enabled phase. Scheduled rollouts enable phases only inside windows that the
// schedule opens with the window signal.
func RolloutWorkflow(ctx workflow.Context, in api.RolloutInput) (api.RolloutStatus, error) {
	r := &rolloutRun{plan: in.Plan, st: in.State}
	if r.st == nil {
		r.st = &api.RolloutStatus{Plan: in.Plan.Name, Scheduled: in.Scheduled, Step: rolloutplan.StepPreflight, State: rolloutplan.StateRunning}
	}
	if err := r.register(ctx); err != nil {
		return *r.st, err
	}
	// Since version 1 an enable that failed is listed as a partial change, so a rollback routes
	// back the nodes it may have switched; before, they stayed on DRA with nothing to undo them.
	r.undoFailedEnable = workflow.GetVersion(ctx, "failed-enable-undone", workflow.DefaultVersion, 1) >= 1
	// A run continues as new only when its code did (983cadb on): a run that records any marker
	// of that code. failed-enable-undone is recorded at every run's start since 5fad03b; runs of
	// the release before it record gates-yield-to-commands, rolled-back-acts-on-rollback or
	// drain-backs-off at the waits that grow a history. A run of 18bd934 records none and waits
	// on with timers where a long history has the suggestion set, as its code did.
	r.continues = r.undoFailedEnable
	r.publish(ctx)
	if r.st.State == rolloutplan.StateBlocked || r.st.State == rolloutplan.StateRolledBack {
		// The previous run continued as new while holding: hold on where it stopped.
		if err := r.held(ctx); err != nil || r.ended {
			return *r.st, err
		}
	}
	for r.st.Phase < len(r.plan.Phases) {
		// An accepted rollback is acted on first: its handler answers once the loop has carried
		// it out, and continuing as new waits for every handler to finish.
		if r.continues && historyFull(ctx) && r.st.RollbackPending == nil {
			return *r.st, r.continueAsNew(ctx)
		}
		if err := r.step(ctx); err != nil {
			return *r.st, err
		}
		if r.ended {
			return *r.st, nil
		}
	}
	r.st.State = rolloutplan.StateCompleted
	r.note(ctx, "rollout completed: every phase passed its gates")
	r.publish(ctx)
	return *r.st, nil
}

type rolloutRun struct {
	plan  rolloutplan.Plan
	st    *api.RolloutStatus
	ended bool
	// windows is the window signal's channel, drained into st before continuing as new.
	windows workflow.ReceiveChannel
	// shown is the phase and state last written to the search attributes.
	shown [2]string
	// undoFailedEnable: a failed enable is listed as a partial change (a rollback undoes it).
	undoFailedEnable bool
	// continues: this run's code continues as new when its history is full (see RolloutWorkflow).
	continues bool
}

// step runs the current phase's current step.
func (r *rolloutRun) step(ctx workflow.Context) error {
	if u := r.st.Unfinished; u != nil {
		r.st.Unfinished = nil
		if r.st.RollbackPending == nil {
			// A resume after a rollback that could not finish tries it again; a rollback command
			// covers it, since it undoes every enabled phase.
			return r.rollback(ctx, u.Phases, u.Reason)
		}
	}
	if r.st.RollbackPending != nil {
		return r.rollback(ctx, len(r.st.Enabled), r.st.RollbackPending.Reason+" (by "+r.st.RollbackPending.Actor+")")
	}
	if err := r.waitToAdvance(ctx); err != nil || r.st.RollbackPending != nil {
		return err
	}
	ph := r.plan.Phases[r.st.Phase]
	in := rollouts.PhaseInput{Plan: r.plan, Phase: r.st.Phase}
	actx := rolloutStepOptions(ctx, 2*time.Minute)
	switch r.st.Step {
	case rolloutplan.StepPreflight:
		var v []rolloutplan.Violation
		if err := workflow.ExecuteActivity(actx, rol.RolloutPreflight, in).Get(ctx, &v); err != nil {
			return r.stuck(ctx, fmt.Sprintf("preflight of phase %s failed: %s", ph.Name, cause(err)))
		}
		r.st.Violations = v
		if len(v) > 0 {
			r.note(ctx, fmt.Sprintf("phase %s blocked at preflight: %d node(s) owned twice or missing; fix and resume", ph.Name, len(v)))
			return r.hold(ctx, rolloutplan.StateBlocked)
		}
		r.st.Step = rolloutplan.StepEnable
	case rolloutplan.StepEnable:
		if ph.Enforcement != nil {
			// Tenants wait for the proof: their claims are refused before the nodes switch.
			if err := r.proofBlock(actx, ctx, ph); err != nil {
				r.st.Step = rolloutplan.StepPreflight
				return r.stuck(ctx, fmt.Sprintf("refusing tenants' claims of phase %s until its enforcement proof passes failed: %s", ph.Name, cause(err)))
			}
		} else if err := r.unblock(actx, ctx, ph.Name); err != nil {
			r.st.Step = rolloutplan.StepPreflight
			return r.stuck(ctx, fmt.Sprintf("lifting the admission block of phase %s failed: %s", ph.Name, cause(err)))
		}
		r.st.Draining = slices.DeleteFunc(r.st.Draining, func(d api.DrainingPhase) bool { return d.Phase() == ph.Name })
		var ch rolloutplan.PhaseChange
		if err := workflow.ExecuteActivity(actx, rol.EnableRolloutPhase, in).Get(ctx, &ch); err != nil {
			// Enable is idempotent: the nodes it switched keep the owner they had recorded, and a
			// resume finishes the switch; a rollback routes them back (a partial change).
			r.st.Step = rolloutplan.StepPreflight
			if !r.undoFailedEnable {
				return r.stuck(ctx, fmt.Sprintf("enable of phase %s failed: %s; nodes it switched stay on DRA until a resume finishes it", ph.Name, cause(err)))
			}
			r.st.Enabled = withChange(r.st.Enabled, rolloutplan.PhaseChange{Phase: ph.Name, At: workflow.Now(ctx), Partial: true})
			return r.stuck(ctx, fmt.Sprintf("enable of phase %s failed: %s; nodes it switched stay on DRA until a resume finishes it or a rollback routes them back", ph.Name, cause(err)))
		}
		ch.At = workflow.Now(ctx)
		r.st.Enabled = withChange(r.st.Enabled, ch)
		if ph.Enforcement != nil {
			r.st.Step = rolloutplan.StepProve
			r.note(ctx, fmt.Sprintf("phase %s enabled on %d node(s); its tenants wait for the enforcement proof", ph.Name, len(ch.Nodes)))
			break
		}
		r.st.SoakUntil = ch.At.Add(ph.Soak.D())
		r.st.Step = rolloutplan.StepSoak
		r.note(ctx, fmt.Sprintf("phase %s enabled on %d node(s); soaking until %s", ph.Name, len(ch.Nodes), r.st.SoakUntil.UTC().Format(time.RFC3339)))
	case rolloutplan.StepSoak:
		// Only a rollback cuts a soak short; a pause holds the step after it.
		_, err := workflow.AwaitWithTimeout(ctx, r.st.SoakUntil.Sub(workflow.Now(ctx)), func() bool { return r.st.RollbackPending != nil })
		if err != nil || r.st.RollbackPending != nil {
			return err
		}
		r.st.Step = rolloutplan.StepGates
	case rolloutplan.StepProve:
		return r.prove(ctx)
	case rolloutplan.StepGates:
		return r.gates(ctx, actx)
	case rolloutplan.StepApprove:
		if ph.Approve && r.st.Phase+1 < len(r.plan.Phases) {
			r.st.Awaiting = ph.Name
			r.st.State = rolloutplan.StateWaitingApproval
			r.publish(ctx)
			r.askApproval(ctx)
			if err := workflow.Await(ctx, func() bool { return r.st.Awaiting == "" || r.st.RollbackPending != nil }); err != nil {
				return err
			}
			if r.st.RollbackPending != nil {
				r.st.Awaiting = ""
				return nil
			}
		}
		r.st.Phase++
		r.st.Step = rolloutplan.StepPreflight
		r.st.State = rolloutplan.StateRunning
		r.st.Violations = nil
	}
	r.publish(ctx)
	return nil
}

// gates measures the phase and rolls it back when a gate fails.
func (r *rolloutRun) gates(ctx, actx workflow.Context) error {
	ph := r.plan.Phases[r.st.Phase]
	ch := r.st.Enabled[len(r.st.Enabled)-1]
	var rep rolloutplan.Report
	in := api.GateInput{Plan: r.plan, Phase: r.st.Phase, Since: ch.At, Expected: ch.Expected()}
	// Measuring is retried a bounded number of times; a phase whose gates cannot be measured has
	// not passed them.
	gctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy: gateRetry()})
	// Since version 1 a rollback or a pause sent while the gates are measured is acted on at once:
	// the measurement is cancelled, and measured again after a resume.
	yields := workflow.GetVersion(ctx, "gates-yield-to-commands", workflow.DefaultVersion, 1) == 1
	r.continues = r.continues || yields
	gctx, cancel := workflow.WithCancel(gctx)
	defer cancel()
	measured := workflow.ExecuteActivity(gctx, rol.EvaluateRolloutGates, in)
	if yields {
		interrupted := func() bool { return r.st.RollbackPending != nil || r.st.Paused }
		if err := workflow.Await(ctx, func() bool { return measured.IsReady() || interrupted() }); err != nil {
			return err
		}
		if !measured.IsReady() {
			cancel()
			_ = measured.Get(ctx, nil) // settles as cancelled
			r.note(ctx, fmt.Sprintf("phase %s: measuring its gates stopped for a command", ph.Name))
			return nil // the step loop acts on the rollback, or holds for the pause and measures again
		}
	}
	if err := measured.Get(ctx, &rep); err != nil {
		reason := fmt.Sprintf("phase %s: its gates could not be measured: %v", ph.Name, err)
		r.warn(ctx, decide.LevelCritical, fmt.Sprintf("rollout %s: %s; rolling the phase back", r.plan.Name, reason))
		return r.rollback(ctx, 1, reason)
	}
	if n := len(r.st.Reports); n > 0 && !r.st.GatesWaitUntil.IsZero() {
		r.st.Reports[n-1] = rep // the measurement that waited for data is replaced, not kept
	} else {
		r.st.Reports = append(r.st.Reports, rep)
	}
	if len(rep.Failed) == 0 && len(rep.Waiting) > 0 {
		now := workflow.Now(ctx)
		if r.st.GatesWaitUntil.IsZero() {
			r.st.GatesWaitUntil = now.Add(ph.Soak.D())
			r.note(ctx, fmt.Sprintf("phase %s: %s; measuring again until %s", ph.Name, rep.Waiting[0], r.st.GatesWaitUntil.UTC().Format(time.RFC3339)))
		}
		if now.Before(r.st.GatesWaitUntil) {
			r.publish(ctx)
			// Only a rollback cuts the wait short; a pause holds the next measurement.
			_, err := workflow.AwaitWithTimeout(ctx, min(GateRemeasure, r.st.GatesWaitUntil.Sub(now)), func() bool { return r.st.RollbackPending != nil })
			return err
		}
		rep.Failed = append(rep.Failed, rep.Waiting[0]+": still no data after waiting one soak")
		r.st.Reports[len(r.st.Reports)-1] = rep
	}
	r.st.GatesWaitUntil = time.Time{}
	if !rep.Passed() {
		reason := fmt.Sprintf("phase %s failed %d gate(s): %s", ph.Name, len(rep.Failed), rep.Failed[0])
		r.warn(ctx, decide.LevelCritical, fmt.Sprintf("rollout %s: %s; rolling the phase back", r.plan.Name, reason))
		return r.rollback(ctx, 1, reason)
	}
	r.note(ctx, fmt.Sprintf("phase %s passed its gates (%d claims, claim->allocated p99 %s)", ph.Name, rep.Claims, rep.ClaimToAllocated.P99))
	r.st.Step = rolloutplan.StepApprove
	r.publish(ctx)
	return nil
}

// rollback undoes the last n enabled phases, newest first: new claims for their classes are
// refused, their nodes go back to the plugin. Then the rollout waits for resume (which retries
// from the earliest phase undone) or, after the plan's rollbackHold, ends rolled back.
func (r *rolloutRun) rollback(ctx workflow.Context, n int, reason string) error {
	actx := rolloutStepOptions(ctx, 2*time.Minute)
	retry := r.st.Phase
	for n > 0 && len(r.st.Enabled) > 0 {
		ch := r.st.Enabled[len(r.st.Enabled)-1]
		i := r.phaseIndex(ch.Phase)
		block := api.BlockInput{Rollout: r.plan.Name, Phase: ch.Phase, Classes: r.plan.Phases[i].ClassNames(), Reason: reason}
		// Until the block is proven in force (BlockNewClaims waits for a refused dry-run claim),
		// the state query says blocking, never rolled back. (Not published: no new command.)
		r.st.State = rolloutplan.StateBlocking
		if err := workflow.ExecuteActivity(actx, rol.BlockNewClaims, block).Get(ctx, nil); err != nil {
			return r.rollbackStuck(ctx, n, reason, fmt.Sprintf("blocking new claims of phase %s failed: %s", ch.Phase, cause(err)))
		}
		r.st.Blocks = appendBlock(r.st.Blocks, block)
		undo := rollouts.UndoInput{Rollout: r.plan.Name, OwnerLabel: r.plan.OwnerLabel, Change: ch, Reason: reason,
			Drivers: r.plan.Phases[i].Drivers(), DRA: r.plan.DRA}
		if ch.Partial {
			undo.Selector = r.plan.Phases[i].Nodes
		}
		if err := r.undo(ctx, actx, undo); err != nil {
			return r.rollbackStuck(ctx, n, reason, fmt.Sprintf("routing phase %s back failed: %s", ch.Phase, cause(err)))
		}
		r.st.Enabled = r.st.Enabled[:len(r.st.Enabled)-1]
		retry = i
		n--
		r.note(ctx, fmt.Sprintf("phase %s rolled back: %s", ch.Phase, reason))
	}
	r.st.RollbackPending = nil
	r.st.Unproven = ""
	r.st.Phase, r.st.Step = retry, rolloutplan.StepPreflight
	return r.hold(ctx, rolloutplan.StateRolledBack)
}

// A rolled-back rollout looks again at nodes held by bound claims drainPoll after the last look
// that returned one, doubling up to drainPollMax while none is returned: a month-long job costs
// about 300 looks a day, not 5,760.
const (
	drainPoll    = 15 * time.Second
	drainPollMax = 5 * time.Minute
)

// hold waits in a blocked or rolled-back state for resume (retry the current phase from
// preflight) or a rollback. Meanwhile a rolled-back rollout routes held nodes back as their
// claims are released, and it ends after the plan's rollbackHold once none is held.
func (r *rolloutRun) hold(ctx workflow.Context, s rolloutplan.State) error {
	r.st.State = s
	r.st.Retry = false
	r.st.HoldUntil = time.Time{}
	if s == rolloutplan.StateRolledBack {
		r.st.HoldUntil = workflow.Now(ctx).Add(r.plan.RollbackHold.D())
	}
	r.publish(ctx)
	return r.held(ctx)
}

// held is hold's wait. A run whose history is full continues as new from inside it, and the next
// run waits on, to the same deadline.
func (r *rolloutRun) held(ctx workflow.Context) error {
	s := r.st.State
	// A rollback accepted while rolled back (earlier phases still enabled) is acted on at once.
	// Before version 1 the wait looked only at resume, and such a rollback was never run.
	acts := s == rolloutplan.StateRolledBack && workflow.GetVersion(ctx, "rolled-back-acts-on-rollback", workflow.DefaultVersion, 1) == 1
	onRollback := s == rolloutplan.StateBlocked || acts
	r.continues = r.continues || acts
	cond := func() bool { return r.st.Retry || (onRollback && r.st.RollbackPending != nil) }
	if s == rolloutplan.StateRolledBack {
		// Since version 1 the looks at held nodes back off while none is returned.
		backsOff := workflow.GetVersion(ctx, "drain-backs-off", workflow.DefaultVersion, 1) == 1
		r.continues = r.continues || backsOff
		poll := drainPoll
		for {
			wait := r.st.HoldUntil.Sub(workflow.Now(ctx))
			if len(r.st.Draining) > 0 && (wait > poll || wait <= 0) {
				wait = poll
			}
			if wait <= 0 {
				r.note(ctx, fmt.Sprintf("no resume within %s: the rollout ends rolled back; its admission blocks stay until the phases are enabled again", r.plan.RollbackHold))
				r.ended = true
				r.publish(ctx)
				return nil
			}
			ok, err := workflow.AwaitWithTimeout(ctx, wait, cond)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			held := heldNodes(r.st.Draining)
			if err := r.drain(ctx); err != nil {
				// The held nodes stay on DRA, which is safe; the next look tries again.
				workflow.GetLogger(ctx).Warn("held nodes not looked at", "error", err)
			}
			if backsOff && heldNodes(r.st.Draining) < held {
				poll = drainPoll
			} else if backsOff {
				poll = min(2*poll, drainPollMax)
			}
			if r.continues && !cond() && r.st.RollbackPending == nil && historyFull(ctx) {
				return r.continueAsNew(ctx)
			}
		}
	} else if err := workflow.Await(ctx, cond); err != nil {
		return err
	}
	r.st.Retry = false
	r.st.HoldUntil = time.Time{}
	r.st.State = rolloutplan.StateRunning
	r.publish(ctx)
	return nil
}

// heldNodes counts the nodes that bound claims keep on DRA.
func heldNodes(ds []api.DrainingPhase) int {
	n := 0
	for _, d := range ds {
		n += len(d.Change.Nodes)
	}
	return n
}

// continueAsNew carries the rollout's whole state, pending commands and windows included, to the
// next run.
func (r *rolloutRun) continueAsNew(ctx workflow.Context) error {
	for {
		var w api.RolloutWindow
		if !r.windows.ReceiveAsync(&w) {
			break
		}
		r.openWindow(ctx, w)
	}
	return continueAsNew(ctx, RolloutWorkflow, api.RolloutInput{Plan: r.plan, Scheduled: r.st.Scheduled, State: r.st})
}

// undo routes a phase's nodes back; nodes held by bound claims are kept for drain.
func (r *rolloutRun) undo(ctx, actx workflow.Context, in rollouts.UndoInput) error {
	var res rollouts.UndoResult
	if err := workflow.ExecuteActivity(actx, rol.UndoRolloutPhase, in).Get(ctx, &res); err != nil {
		return fmt.Errorf("route %s back: %w", in.Change.Phase, err)
	}
	before := len(r.st.Draining)
	r.st.Draining = slices.DeleteFunc(r.st.Draining, func(d api.DrainingPhase) bool { return d.Phase() == in.Change.Phase })
	wasHeld := len(r.st.Draining) < before
	if len(res.Returned) > 0 {
		r.note(ctx, fmt.Sprintf("phase %s: %v back with the plugin", in.Change.Phase, res.Returned))
	}
	if len(res.Held) == 0 {
		return nil
	}
	held := rolloutplan.PhaseChange{Phase: in.Change.Phase, At: in.Change.At}
	var names []string
	for _, h := range res.Held {
		held.Nodes = append(held.Nodes, h.NodeChange)
		names = append(names, fmt.Sprintf("%s (%d claims)", h.Node, h.Claims))
	}
	r.st.Draining = append(r.st.Draining, api.DrainingPhase{Change: held, Drivers: in.Drivers, Reason: in.Reason})
	if !wasHeld {
		r.note(ctx, fmt.Sprintf("phase %s: held on DRA while claims are allocated on their devices: %s; they go back once released", in.Change.Phase, strings.Join(names, ", ")))
	}
	return nil
}

// drain tries again to route back the nodes bound claims held.
func (r *rolloutRun) drain(ctx workflow.Context) error {
	actx := rolloutStepOptions(ctx, 2*time.Minute)
	for _, d := range append([]api.DrainingPhase(nil), r.st.Draining...) {
		in := rollouts.UndoInput{Rollout: r.plan.Name, OwnerLabel: r.plan.OwnerLabel, Change: d.Change, Drivers: d.Drivers, Reason: d.Reason, DRA: r.plan.DRA}
		if err := r.undo(ctx, actx, in); err != nil {
			return err
		}
	}
	return nil
}

// GateRemeasure is how often a phase whose query gates wait for data is measured again.
const GateRemeasure = 30 * time.Second

// stuck holds the rollout blocked after a step failed: a person fixes the cause and resumes (the
// phase starts again from preflight) or rolls back.
func (r *rolloutRun) stuck(ctx workflow.Context, reason string) error {
	r.warn(ctx, decide.LevelCritical, fmt.Sprintf("rollout %s: %s; fix it, then resume or roll back", r.plan.Name, reason))
	r.note(ctx, reason)
	return r.hold(ctx, rolloutplan.StateBlocked)
}

// rollbackStuck holds the rollout blocked after a rollback could not finish; the phases not undone
// stay enabled, and a resume or a rollback command tries again.
func (r *rolloutRun) rollbackStuck(ctx workflow.Context, n int, reason, failure string) error {
	r.st.RollbackPending = nil
	r.st.Unfinished = &api.UnfinishedRollback{Phases: n, Reason: reason}
	return r.stuck(ctx, "rollback ("+reason+") did not finish: "+failure)
}

// waitToAdvance holds the rollout while it is paused, and a scheduled rollout's preflight and
// enable until a window is open.
func (r *rolloutRun) waitToAdvance(ctx workflow.Context) error {
	needsWindow := func() bool {
		return r.st.Scheduled && (r.st.Step == rolloutplan.StepPreflight || r.st.Step == rolloutplan.StepEnable) &&
			!workflow.Now(ctx).Before(r.st.WindowUntil)
	}
	for r.st.Paused || needsWindow() {
		prev := r.st.State
		if r.st.Paused {
			r.st.State = rolloutplan.StatePaused
		} else {
			r.st.State = rolloutplan.StateWaitingWindow
		}
		if prev != r.st.State {
			r.publish(ctx)
		}
		if err := workflow.Await(ctx, func() bool { return r.st.RollbackPending != nil || !r.st.Paused && !needsWindow() }); err != nil {
			return err
		}
		if r.st.RollbackPending != nil {
			return nil
		}
	}
	if r.st.State == rolloutplan.StatePaused || r.st.State == rolloutplan.StateWaitingWindow {
		r.st.State = rolloutplan.StateRunning
		r.publish(ctx)
	}
	return nil
}

// unblock lifts a phase's admission block before it is enabled again.
func (r *rolloutRun) unblock(actx, ctx workflow.Context, phase string) error {
	kept := r.st.Blocks[:0]
	for _, b := range r.st.Blocks {
		if b.Phase != phase {
			kept = append(kept, b)
			continue
		}
		if err := workflow.ExecuteActivity(actx, rol.UnblockNewClaims, b).Get(ctx, nil); err != nil {
			return fmt.Errorf("lift the admission block of %s: %w", phase, err)
		}
	}
	r.st.Blocks = kept
	return nil
}

// withChange lists an enabled phase's change, in place of the partial change a failed enable of
// the same phase left.
func withChange(cs []rolloutplan.PhaseChange, c rolloutplan.PhaseChange) []rolloutplan.PhaseChange {
	if n := len(cs); n > 0 && cs[n-1].Phase == c.Phase && cs[n-1].Partial {
		cs[n-1] = c
		return cs
	}
	return append(cs, c)
}

func appendBlock(bs []api.BlockInput, b api.BlockInput) []api.BlockInput {
	for i := range bs {
		if bs[i].Phase == b.Phase {
			bs[i] = b
			return bs
		}
	}
	return append(bs, b)
}

func (r *rolloutRun) phaseIndex(name string) int {
	for i, ph := range r.plan.Phases {
		if ph.Name == name {
			return i
		}
	}
	return r.st.Phase
}

// cause is what a failed activity said, without the wrapping of the activity's error.
func cause(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	for errors.Unwrap(err) != nil {
		err = errors.Unwrap(err)
	}
	return err.Error()
}
