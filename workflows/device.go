package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Actor is recorded on decisions DeviceWarden makes by itself.
const Actor = policy.Actor

var a *activities.Activities

// DeviceWorkflow is the long-lived entity workflow for one device (ID "device/<driver>/<pool>/<device>").
// Observations and operator commands arrive as signals; a timer wakes it for the next deadline
// (tolerance end, staleness, breaker retry, lease expiry). internal/policy decides; this executes.
func DeviceWorkflow(ctx workflow.Context, in DeviceInput) error {
	st := in.State
	if st == nil {
		if in.Policy.Name == "" {
			in.Policy = policy.Default()
		}
		st = policy.NewState(in.Device, in.Node, in.Policy, in.DryRun)
	}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (policy.DeviceState, error) { return *st, nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			NonRetryableErrorTypes: []string{"RuleNameCollision"},
		},
	})
	obsCh := workflow.GetSignalChannel(ctx, SignalObservation)
	cmdChs := make([]workflow.ReceiveChannel, len(OperatorSignals))
	for i, name := range OperatorSignals {
		cmdChs[i] = workflow.GetSignalChannel(ctx, name)
	}
	pending := func() bool {
		n := obsCh.Len()
		for _, c := range cmdChs {
			n += c.Len()
		}
		return n > 0
	}
	var timer workflow.Future
	var timerAt time.Time
	var cancelTimer workflow.CancelFunc
	lastState := st.State
	for {
		// Keep one timer for the next deadline; replace it only when the deadline moves.
		if next := st.NextDeadline(); !next.Equal(timerAt) {
			if cancelTimer != nil {
				cancelTimer()
			}
			timer, timerAt, cancelTimer = nil, next, nil
			if !next.IsZero() {
				tctx, cancel := workflow.WithCancel(ctx)
				timer, cancelTimer = workflow.NewTimer(tctx, max(0, next.Sub(workflow.Now(ctx)))), cancel
			}
		}
		var acts []policy.Action
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(obsCh, func(c workflow.ReceiveChannel, _ bool) {
			var o policy.Observation
			c.Receive(ctx, &o)
			acts = st.Observe(o, workflow.Now(ctx))
		})
		for i, c := range cmdChs {
			kind := policy.CommandKind(OperatorSignals[i])
			sel.AddReceive(c, func(c workflow.ReceiveChannel, _ bool) {
				var cmd policy.Command
				c.Receive(ctx, &cmd)
				cmd.Kind = kind
				acts = st.Command(cmd, workflow.Now(ctx))
			})
		}
		if timer != nil {
			sel.AddFuture(timer, func(f workflow.Future) {
				timer, timerAt = nil, time.Time{}
				if f.Get(ctx, nil) == nil { // a cancelled timer is not a deadline
					acts = st.Tick(workflow.Now(ctx))
				}
			})
		}
		canceled := false
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { canceled = true })
		sel.Select(ctx)
		if canceled {
			// An operator cancelled the workflow: stop deciding; rules already created stay.
			return ctx.Err()
		}
		if err := execute(actx, st, acts); err != nil {
			return err
		}
		if st.State != lastState {
			lastState = st.State
			if err := workflow.UpsertTypedSearchAttributes(ctx, SearchDeviceState.ValueSet(string(st.State))); err != nil {
				workflow.GetLogger(ctx).Warn("upsert search attribute failed", "error", err)
			}
		}
		if pending() {
			continue
		}
		if st.Idle() {
			// Healthy and held by no pod: nothing to watch. A later report starts a new run.
			return nil
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			next := in
			next.State = st
			return workflow.NewContinueAsNewError(ctx, DeviceWorkflow, next)
		}
	}
}

// execute carries out the actions in order. Automatic taints first ask the circuit breaker; a
// denied or failed permit holds the action for a later retry instead of failing the workflow.
func execute(ctx workflow.Context, st *policy.DeviceState, acts []policy.Action) error {
	wfID := workflow.GetInfo(ctx).WorkflowExecution.ID
	for _, act := range acts {
		switch act.Kind {
		case policy.ActAlert:
			actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}})
			in := activities.AlertInput{Device: st.Device, Level: act.Level, Text: act.Reason, WorkflowID: wfID}
			if err := workflow.ExecuteActivity(actx, a.Alert, in).Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Warn("alert not delivered", "error", err)
			}
		case policy.ActTaint:
			// Permit and quarantine are short calls: as local activities they skip two task
			// dispatches (measured: see BENCHMARKS.md). Older runs replay the regular path.
			run := workflow.ExecuteActivity
			if workflow.GetVersion(ctx, "local-taint", workflow.DefaultVersion, 1) >= 1 {
				run = executeLocal
			}
			if act.Automatic {
				var permit policy.PermitResult
				err := run(ctx, a.AcquirePermit, activities.PermitInput{Device: st.Device, Action: act.To}).Get(ctx, &permit)
				if err != nil {
					st.Hold(act, "circuit breaker unreachable: "+err.Error(), workflow.Now(ctx))
					continue
				}
				if !permit.Granted {
					st.Hold(act, permit.Reason, workflow.Now(ctx))
					continue
				}
			}
			now := workflow.Now(ctx)
			qin := activities.QuarantineInput{
				Device: st.Device, Reason: act.Reason, Actor: act.Actor, WorkflowID: wfID,
				ExpiresAt: now.Add(st.Policy.QuarantineLease), Effect: resourcev1.DeviceTaintEffect(act.Effect),
			}
			var res activities.QuarantineResult
			if err := run(ctx, a.Quarantine, qin).Get(ctx, &res); err != nil {
				st.Hold(act, "taint failed: "+err.Error(), now)
				continue
			}
			st.Applied(act, res.RuleName, workflow.Now(ctx))
			// Workflows started before node escalation existed must replay without this activity.
			if workflow.GetVersion(ctx, "node-escalation", workflow.DefaultVersion, 1) >= 1 {
				f := policy.NodeFailure{Node: st.Node, Device: st.Device.String(), State: act.To, Threshold: st.Policy.EscalationThreshold}
				if err := workflow.ExecuteActivity(ctx, a.ReportNodeFailure, f).Get(ctx, nil); err != nil {
					workflow.GetLogger(ctx).Warn("node escalation not reported", "error", err)
				}
			}
		}
	}
	return nil
}

// executeLocal runs an activity as a local activity with the same timeout and retry policy.
func executeLocal(ctx workflow.Context, activity any, args ...any) workflow.Future {
	ao := workflow.GetActivityOptions(ctx)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: ao.StartToCloseTimeout, RetryPolicy: ao.RetryPolicy})
	return workflow.ExecuteLocalActivity(lctx, activity, args...)
}
