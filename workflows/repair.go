package workflows

import (
	"errors"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// repair runs a repair step once the circuit breaker grants it from the step's budget: resets
// from the reset budget, node steps from the reboot budget.
func repair(ctx workflow.Context, st *decide.DeviceState, act decide.Action) []decide.Action {
	step := act.Plan.Step
	var permit breaker.PermitResult
	in := remediation.PermitInput{Device: st.Device, Action: breaker.Reset, Woken: act.Woken}
	if step.Kind == policy.RepairNode {
		// The node's permit, held for the step's longest run unless the step gives it back first.
		in.Action, in.Node, in.Hold = breaker.Reboot, st.Node, nodeStepTimeout(step)*3+time.Minute
	} else {
		// A reset's permit, held as long: a reset that runs past the breaker's default hold
		// keeps its place, and its end is counted.
		in.Hold = resetPermitHold(act)
	}
	if err := executeLocal(ctx, rem.AcquirePermit, in).Get(ctx, &permit); err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == remediation.ErrNodeGone {
			// The device's node was deleted: no retry brings it back, the try failed.
			return report(st, decide.Result{Action: act, Outcome: decide.Done, Check: decide.StepResult{Reason: appErr.Message(), At: workflow.Now(ctx)}}, workflow.Now(ctx))
		}
		return report(st, decide.Result{Action: act, Outcome: decide.Held, Reason: "circuit breaker unreachable: " + err.Error()}, workflow.Now(ctx))
	}
	if !permit.Granted {
		return report(st, decide.Result{Action: act, Outcome: decide.Denied, Reason: permit.Reason}, workflow.Now(ctx))
	}
	if step.Kind == policy.RepairNode {
		return remediateNode(ctx, st, act, step)
	}
	return check(ctx, st, act)
}

// remediateNode asks the node's remediator for a reboot and waits for it (RemediateNode); an
// activity that fails outright is a failed try.
func remediateNode(ctx workflow.Context, st *decide.DeviceState, act decide.Action, step policy.RepairStep) []decide.Action {
	in := remediation.NodeInput{Device: st.Device, Node: st.Node, Step: step, Try: act.Plan.Try, TryAt: act.Plan.TryAt,
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, BootSeen: act.Plan.BootSeen}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: nodeStepTimeout(step),
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: checkAttempts},
	})
	var res decide.StepResult
	if err := workflow.ExecuteActivity(actx, rem.RemediateNode, in).Get(ctx, &res); err != nil {
		res = decide.StepResult{Reason: "node step could not run: " + err.Error(), At: workflow.Now(ctx), NotRun: takes(ctx, 18)}
		if takes(ctx, 10) {
			// Its object, fences and permit would stand until their holds end: clear them.
			endNodeStep(ctx, in)
		}
	}
	if res.Busy && len(res.Holders) > 0 {
		// holders: move. The node is fenced; its holders move with the policy's migration (a
		// migration already started for a workload is joined), and the try looks again later.
		startMigrations(ctx, st, podRefs(res.Holders))
	}
	return report(st, decide.Result{Action: act, Outcome: decide.Done, Check: res}, workflow.Now(ctx))
}

// resetPermitHold is how long a reset step can run: each of its targets' checks, every attempt, and a
// minute more. Zero (the breaker's default) when the action carries no check.
func resetPermitHold(act decide.Action) time.Duration {
	if act.Check == nil {
		return 0
	}
	targets := max(1, len(act.Plan.Targets))
	return time.Duration(targets*checkAttempts)*(act.Check.Timeout.D()+2*time.Minute) + time.Minute
}

// nodeStepTimeout bounds one run of a node step's activity (it has three): the reboot's wait and
// its node check's.
func nodeStepTimeout(step policy.RepairStep) time.Duration {
	d := step.Check.Timeout.D() + 2*time.Minute
	if c := step.NodeCheck; c != nil {
		d += c.Timeout.D()
	}
	return d
}

// endNodeStep clears what a node step left on its node (EndNodeStep); a failure is logged, and the
// permit's hold and the fences' owner check bound what stays.
func endNodeStep(ctx workflow.Context, in remediation.NodeInput) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5}})
	if err := workflow.ExecuteActivity(actx, rem.EndNodeStep, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("node step's leftovers not cleared", "node", in.Node, "error", err)
	}
}

// podRefs are the Pods a step named ("namespace/name").
func podRefs(holders []string) []decide.PodRef {
	var pods []decide.PodRef
	for _, h := range holders {
		if ns, name, ok := strings.Cut(h, "/"); ok {
			pods = append(pods, decide.PodRef{Namespace: ns, Name: name})
		}
	}
	return pods
}
