package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// rolloutStart are the start options of a plan's rollout workflow.
func rolloutStart(p rolloutplan.Plan) client.StartWorkflowOptions {
	phase := ""
	if len(p.Phases) > 0 {
		phase = p.Phases[0].Name
	}
	return client.StartWorkflowOptions{ID: RolloutID(p.Name), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(SearchRolloutName.ValueSet(p.Name),
			SearchRolloutPhase.ValueSet(phase), SearchRolloutState.ValueSet(string(rolloutplan.StateRunning)))}
}

// StartRollout starts a plan's rollout; a rollout of the same name that is still running is an error.
func StartRollout(ctx context.Context, c client.Client, p rolloutplan.Plan) (client.WorkflowRun, error) {
	run, err := c.ExecuteWorkflow(ctx, rolloutStart(p), RolloutWorkflow, RolloutInput{Plan: p})
	if err != nil {
		return nil, fmt.Errorf("start rollout %s: %w", p.Name, err)
	}
	return run, nil
}

// OpenRolloutWindow opens a window on a scheduled rollout, starting it when it is not running.
func OpenRolloutWindow(ctx context.Context, c client.Client, p rolloutplan.Plan, until time.Time) error {
	opts := rolloutStart(p)
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	// A window never starts a rollout again once a run of it has ended (completed, rolled back,
	// terminated): the server refuses, and the window reads the outcome (ErrRolloutEnded). A
	// person starts it again with `rollout start`.
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
	_, err := c.SignalWithStartWorkflow(ctx, RolloutID(p.Name), SignalRolloutWindow, RolloutWindow{Until: until}, opts,
		RolloutWorkflow, RolloutInput{Plan: p, Scheduled: true})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return ErrRolloutEnded
	}
	if err != nil {
		return fmt.Errorf("open window on rollout %s: %w", p.Name, err)
	}
	return nil
}

// ErrRolloutEnded: a run of the rollout has ended, and a window does not start another.
var ErrRolloutEnded = errors.New("a run of the rollout has ended")

// EndedRollout is how the last run of a rollout ended: its result's state when it returned one
// (completed, rolled back), StateTerminated otherwise.
func EndedRollout(ctx context.Context, c client.Client, name string) (rolloutplan.State, error) {
	d, err := c.DescribeWorkflowExecution(ctx, RolloutID(name), "")
	if err != nil {
		return "", fmt.Errorf("describe rollout %s: %w", name, err)
	}
	if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		return rolloutplan.StateTerminated, nil
	}
	var st RolloutStatus
	if err := c.GetWorkflow(ctx, RolloutID(name), "").Get(ctx, &st); err != nil {
		return "", fmt.Errorf("read the result of rollout %s: %w", name, err)
	}
	return st.State, nil
}

// SendRolloutCommand sends a command update and returns the rollout's status; a refused command
// is an error with the reason.
func SendRolloutCommand(ctx context.Context, c client.Client, name, cmd string, body rolloutplan.Command) (RolloutStatus, error) {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: RolloutID(name), UpdateName: cmd,
		Args: []any{body}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return RolloutStatus{}, fmt.Errorf("%s rollout %s: %w", cmd, name, err)
	}
	var st RolloutStatus
	if err := h.Get(ctx, &st); err != nil {
		return RolloutStatus{}, fmt.Errorf("%s rollout %s: %w", cmd, name, err)
	}
	return st, nil
}

// ScheduleRollout creates a Schedule that opens a window of the given length on the plan's rollout
// at every cron time; it pauses itself when a window finds the rollout rolled back or blocked.
func ScheduleRollout(ctx context.Context, c client.Client, p rolloutplan.Plan, cron string, window time.Duration) (string, error) {
	id := "rollout-schedule/" + p.Name
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:             id,
		Spec:           client.ScheduleSpec{CronExpressions: []string{cron}},
		Overlap:        enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		PauseOnFailure: true,
		Memo:           map[string]any{"plan": p.Name},
		Action: &client.ScheduleWorkflowAction{ID: "rollout-window/" + p.Name, Workflow: RolloutWindowWorkflow,
			Args: []any{RolloutWindowInput{Plan: p, Window: policy.JSONDuration(window)}}, TaskQueue: TaskQueue},
	})
	if err != nil {
		return "", fmt.Errorf("create schedule %s: %w", id, err)
	}
	return id, nil
}
