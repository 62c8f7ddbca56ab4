package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// execute carries out the actions in order; an action's outcome may add more (a probe that passed
// moves on to probation). Automatic taints first ask the circuit breaker; a denied or failed
// permit holds the action for a later retry instead of failing the workflow.
func execute(ctx workflow.Context, st *decide.DeviceState, acts []decide.Action) error {
	actx := kubeCallOptions(ctx)
	for len(acts) > 0 {
		act := decide.Prepare(st, acts[0])
		acts = acts[1:]
		if act.Plan.Drop != "" {
			// The quarantine ended while its actions waited their turn (a refresh before it found
			// the rule deleted by hand: an operator release): they no longer apply.
			workflow.GetLogger(ctx).Info("action dropped", "action", act.Kind, "why", act.Plan.Drop)
			continue
		}
		switch act.Kind {
		case decide.ActAlert:
			alert(ctx, st, act)
		case decide.ActTaint:
			// The alert that goes with an automatic taint rides along with the permit request:
			// if the breaker holds the action, the worker sends it with the others held.
			var held *decide.Action
			if act.Automatic && len(acts) > 0 && acts[0].Kind == decide.ActAlert && takes(ctx, 2) {
				held = &acts[0]
			}
			more, alerted := taint(actx, st, act, held)
			if alerted {
				acts = acts[1:]
			}
			acts = append(acts, more...)
		case decide.ActInspectRule:
			var info decide.RuleInfo
			in := remediation.InspectInput{Device: st.Device, Effect: act.Effect, Members: act.Plan.Members}
			if err := executeLocal(actx, rem.InspectRule, in).Get(ctx, &info); err != nil {
				workflow.GetLogger(ctx).Warn("rule not inspected", "error", err)
				continue
			}
			acts = append(acts, report(st, decide.Result{Action: act, Outcome: decide.Done, Info: info}, workflow.Now(ctx))...)
		case decide.ActRefreshRule:
			acts = append(acts, refresh(actx, st, act)...)
		case decide.ActFenceMembers:
			fenceMembers(actx, st, act)
		case decide.ActProbe, decide.ActCanary:
			acts = append(acts, check(ctx, st, act)...)
		case decide.ActRepair:
			acts = append(acts, repair(actx, st, act)...)
		case decide.ActRetire:
			in := remediation.RetireInput{Device: st.Device, Node: st.Node, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID,
				Reason: act.Reason, Evidence: act.Plan.Evidence}
			if err := workflow.ExecuteActivity(actx, rem.RecordRetirement, in).Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Warn("retired device's evidence not written", "error", err)
			}
		case decide.ActRequestApproval:
			p := act.Plan
			req := notify.ApprovalRequest{Device: st.Device, Node: st.Node, Reason: p.QuarantineReason, Summary: act.Reason,
				WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Channel: p.Channel,
				Probe: p.Probe, Canary: p.Canary, Review: p.Ask, Step: p.AskStep}
			if err := workflow.ExecuteActivity(notifyOptions(ctx), rem.RequestApproval, req).Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Warn("approval request not posted; approve with the CLI", "error", err)
			}
		case decide.ActAppFault:
			in := remediation.AppFaultInput{Device: st.Device, Reason: act.Reason, Reporters: act.Plan.Reporters, At: workflow.Now(ctx)}
			notice(ctx, "application fault not told", workflow.ExecuteActivity(notifyOptions(ctx), rem.NoteAppFault, in))
		case decide.ActEndNodeStep:
			endNodeStep(ctx, remediation.NodeInput{Device: st.Device, Node: st.Node, Step: act.Plan.Step,
				WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID})
		case decide.ActRelease:
			p := act.Plan
			in := remediation.ReleaseInput{Device: st.Device, Reason: act.Reason, Actor: act.Actor,
				QuarantinedAt: p.QuarantinedAt, FirstReviewPassed: p.FirstReviewPassed, Node: st.Node, Reporters: p.Reporters,
				Members: p.Members, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, RepairedBy: p.RepairedBy,
				NodeFence: p.NodeFence, Cause: p.CauseClass, First: p.FirstStep}
			res := decide.Result{Action: act, Outcome: decide.Done}
			if err := workflow.ExecuteActivity(actx, rem.ReleaseRule, in).Get(ctx, nil); err != nil {
				res = decide.Result{Action: act, Outcome: decide.Failed, Reason: err.Error()}
			}
			acts = append(acts, report(st, res, workflow.Now(ctx))...)
		}
	}
	return nil
}

// report hands an action's outcome to the decisions, as of at.
func report(st *decide.DeviceState, res decide.Result, at time.Time) []decide.Action {
	return decide.Step(st, decide.Event{Kind: decide.EventResult, At: at, Result: res})
}

// alertInput is the alert of an action about the device, to channel.
func alertInput(ctx workflow.Context, st *decide.DeviceState, act decide.Action, channel string) notify.AlertInput {
	return notify.AlertInput{Device: st.Device, Level: act.Level, Text: act.Reason, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Channel: channel}
}

func alert(ctx workflow.Context, st *decide.DeviceState, act decide.Action) {
	in := alertInput(ctx, st, act, act.Plan.Channel)
	if act.Gather && takes(ctx, 3) {
		// An alert many devices raise at once joins the worker's summary: no activity task,
		// no second workflow task.
		notice(ctx, "alert not delivered", executeLocal(notifyOptions(ctx), rem.NoteAlert, in))
		return
	}
	notice(ctx, "alert not delivered", workflow.ExecuteActivity(notifyOptions(ctx), rem.Alert, in))
}

// taint carries out a taint: an automatic one asks the circuit breaker first. With held set, the
// permit request carries that alert, and alerted says the worker took it.
func taint(ctx workflow.Context, st *decide.DeviceState, act decide.Action, held *decide.Action) (more []decide.Action, alerted bool) {
	if act.Plan.UnitUnknown {
		// A unit's ID names no device: without its devices there is nothing to fence. The
		// watcher's next report says which they are; the action waits for it.
		report(st, decide.Result{Action: act, Outcome: decide.Held, Reason: "the unit's devices are not known yet"}, workflow.Now(ctx))
		return nil, false
	}
	// Permit and quarantine are short calls: as local activities they skip two task
	// dispatches (measured: see BENCHMARKS.md). Older runs replay the regular path.
	run := workflow.ExecuteActivity
	if changed(ctx, "local-taint") {
		run = executeLocal
	}
	permitIn := permitInput(ctx, st, act, held)
	// Older runs ask for the permit in a local activity of its own, then create the rule.
	if permitIn != nil && !takes(ctx, 4) {
		var permit breaker.PermitResult
		err := run(ctx, rem.AcquirePermit, *permitIn).Get(ctx, &permit)
		if stop, alerted := permitAnswered(ctx, st, act, permit, err); stop {
			return nil, alerted
		}
		permitIn = nil
	}
	now := workflow.Now(ctx)
	qin := quarantineInput(ctx, st, act, now)
	var res remediation.QuarantineResult
	var err error
	if permitIn != nil {
		// The permit and the rule in one local activity: nothing between the report and the rule.
		var both remediation.QuarantineWithPermitResult
		err = executeLocal(ctx, rem.QuarantineWithPermit, remediation.QuarantineWithPermitInput{Permit: *permitIn, Quarantine: qin}).Get(ctx, &both)
		var appErr *temporal.ApplicationError
		unreachable := errors.As(err, &appErr) && appErr.Type() == remediation.ErrPermitUnavailable
		if unreachable || err == nil {
			if stop, alerted := permitAnswered(ctx, st, act, both.Permit, err); stop {
				return nil, alerted
			}
		}
		res = both.Rule
	} else {
		err = run(ctx, rem.Quarantine, qin).Get(ctx, &res)
	}
	if err != nil {
		return report(st, decide.Result{Action: act, Outcome: decide.Failed, Reason: err.Error()}, now), false
	}
	// What follows a taint (a repair ladder's first step, or a lemon's retirement) runs after the
	// node report and the migrations below.
	more = report(st, decide.Result{Action: act, Outcome: decide.Done, Rule: res.RuleName, Effect: res.Effect}, workflow.Now(ctx))
	// Workflows started before node escalation existed must replay without this activity.
	if changed(ctx, "node-escalation") {
		f := escalation.NodeFailure{Node: st.Node, Device: st.Device.String(), State: act.To, Threshold: st.Policy.EscalationThreshold}
		notice(ctx, "node escalation not reported", workflow.ExecuteActivity(ctx, rem.ReportNodeFailure, f))
	}
	if pods := act.Plan.Migrate; len(pods) > 0 && changed(ctx, "migrate") {
		startMigrations(ctx, st, pods)
		report(st, decide.Result{Action: act, Outcome: decide.Moving, Pods: pods}, workflow.Now(ctx))
	}
	return more, false
}

// permitAnswered applies the circuit breaker's answer to an automatic taint: the action is held
// when the breaker could not be asked (unreachable), denied when it said no. stop says the taint
// ends here; alerted, that the worker sent the held device's alert with the request.
func permitAnswered(ctx workflow.Context, st *decide.DeviceState, act decide.Action, permit breaker.PermitResult, unreachable error) (stop, alerted bool) {
	switch {
	case unreachable != nil:
		report(st, decide.Result{Action: act, Outcome: decide.Held, Reason: "circuit breaker unreachable: " + unreachable.Error()}, workflow.Now(ctx))
		return true, false
	case !permit.Granted:
		report(st, decide.Result{Action: act, Outcome: decide.Denied, Reason: permit.Reason}, workflow.Now(ctx))
		return true, permit.Alerted
	}
	return false, false
}

func refresh(ctx workflow.Context, st *decide.DeviceState, act decide.Action) []decide.Action {
	in := remediation.QuarantineInput{Device: st.Device, Reason: act.Plan.RuleReason, Actor: act.Actor, Key: act.Key,
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, ExpiresAt: act.ExpiresAt, Effect: resourcev1.DeviceTaintEffect(act.Effect),
		Members: act.Plan.Members}
	var res remediation.RefreshResult
	if err := executeLocal(ctx, rem.RefreshRule, in).Get(ctx, &res); err != nil {
		return report(st, decide.Result{Action: act, Outcome: decide.Failed, Reason: err.Error()}, workflow.Now(ctx))
	}
	if res.Missing {
		return report(st, decide.Result{Action: act, Outcome: decide.Missing}, workflow.Now(ctx))
	}
	return report(st, decide.Result{Action: act, Outcome: decide.Done, Effect: res.Effect}, workflow.Now(ctx))
}

// fenceMembers extends a unit's standing fence to every device it is published as. A failure is
// logged: the heartbeat's look at the rules finds the device still unfenced and asks again.
func fenceMembers(ctx workflow.Context, st *decide.DeviceState, act decide.Action) {
	in := remediation.QuarantineInput{Device: st.Device, Reason: act.Plan.RuleReason, Actor: act.Plan.RuleActor, Key: act.Key,
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, ExpiresAt: act.ExpiresAt, Effect: resourcev1.DeviceTaintEffect(act.Effect),
		Members: act.Plan.Members}
	if err := executeLocal(ctx, rem.Quarantine, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("unit not fenced in full", "unit", st.Device.String(), "why", act.Reason, "error", err)
	}
}

// check runs a probe or canary Pod on each device the unit is proven on (the device itself, a
// unit's whole device, or every form of it); the first failure is the result.
func check(ctx workflow.Context, st *decide.DeviceState, act decide.Action) []decide.Action {
	var res decide.StepResult
	targets := act.Plan.Targets
	for _, id := range targets {
		res = checkOne(ctx, st, act, id)
		if len(targets) > 1 {
			res.Reason = id.Device + ": " + res.Reason
		}
		if !res.Passed || res.Busy {
			break
		}
	}
	if act.Kind == decide.ActRepair && res.Busy && len(res.Holders) > 0 {
		// holders: move. The reset's domain is fenced; its other devices' holders move with the
		// policy's migration, and the try looks again later. (No history before reset domains
		// has a reset's holders: the activity never named them.)
		startMigrations(ctx, st, podRefs(res.Holders))
	}
	return report(st, decide.Result{Action: act, Outcome: decide.Done, Check: res}, workflow.Now(ctx))
}

// checkAttempts bounds a check's activity; a repair Pod outlives every attempt but the last.
const checkAttempts = 3

// checkOne runs one probe or canary Pod; an activity that fails outright is a failed check.
func checkOne(ctx workflow.Context, st *decide.DeviceState, act decide.Action, id device.ID) decide.StepResult {
	c, p := *act.Check, act.Plan
	in := remediation.CheckInput{Device: id, Kind: act.Kind, Check: c, DeviceClass: p.DeviceClass, Identity: p.Identity,
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Attempts: checkAttempts, Review: p.Review}
	if p.Idle != nil {
		// A ladder's repair step: its Pod is keyed by its try, and waits for the unit, and the
		// reset domain's other devices, to be idle.
		in.TryAt, in.Idle, in.Step, in.Permit = p.TryAt, p.Idle, string(p.Step.Kind), st.Device
		in.Domain, in.Holders, in.Since = st.Policy.ResetDomain, p.Step.Holders, p.Since
	}
	cctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: c.Timeout.D() + 2*time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: checkAttempts,
			NonRetryableErrorTypes: []string{remediation.ErrNoIdentity}},
	})
	var res decide.StepResult
	if err := workflow.ExecuteActivity(cctx, rem.RunCheck, in).Get(ctx, &res); err != nil {
		// Every attempt failed (the apiserver unreachable, the device not singled out): the
		// tooling's failure, no verdict on the device.
		res = decide.StepResult{Reason: string(act.Kind) + " could not run: " + err.Error(), At: workflow.Now(ctx), NotRun: takes(ctx, 18)}
	}
	return res
}

// permitInput is the breaker request an automatic taint needs (nil for an operator's). With held
// set, the request carries that alert for the worker to send if the action is held.
func permitInput(ctx workflow.Context, st *decide.DeviceState, act decide.Action, held *decide.Action) *remediation.PermitInput {
	if !act.Automatic {
		return nil
	}
	in := &remediation.PermitInput{Device: st.Device, Action: act.To, Woken: act.Woken}
	if held != nil {
		al := alertInput(ctx, st, *held, act.Plan.Channel)
		in.HeldAlert = &al
	}
	return in
}

// quarantineInput is the rule a taint writes: expiring after the quarantine lease, or after the
// review interval while on the release path.
func quarantineInput(ctx workflow.Context, st *decide.DeviceState, act decide.Action, now time.Time) remediation.QuarantineInput {
	in := remediation.QuarantineInput{
		Device: st.Device, Reason: act.Reason, Actor: act.Actor, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID,
		ExpiresAt: now.Add(act.Plan.Lease), Effect: resourcev1.DeviceTaintEffect(act.Effect),
		Decision: string(act.To), Reporters: act.Plan.Reporters, Members: act.Plan.Members,
		PreviousAt: act.Plan.PreviousAt, PreviousClosedAt: act.Plan.PreviousClosedAt,
	}
	return in
}

// executeLocal runs an activity as a local activity with the same timeout and retry policy.
func executeLocal(ctx workflow.Context, activity any, args ...any) workflow.Future {
	ao := workflow.GetActivityOptions(ctx)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: ao.StartToCloseTimeout, RetryPolicy: ao.RetryPolicy})
	return workflow.ExecuteLocalActivity(lctx, activity, args...)
}
