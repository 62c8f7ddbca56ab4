package workflows

import (
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// rolloutLogSize is how many log entries a rollout keeps.
const rolloutLogSize = 100

// register sets the state query, the command updates (validated by rolloutplan.CheckCommand) and the
// window signal.
func (r *rolloutRun) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, api.QueryState, func() (api.RolloutStatus, error) { return *r.st, nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	for _, name := range []string{api.UpdateRolloutPause, api.UpdateRolloutResume, api.UpdateRolloutRollback, api.UpdateRolloutApprove} {
		name := name
		err := workflow.SetUpdateHandlerWithOptions(ctx, name,
			func(ctx workflow.Context, c rolloutplan.Command) (api.RolloutStatus, error) {
				r.apply(ctx, name, c)
				// An approval or a rollback answers once the rollout has acted on it, so the caller
				// sees where it went rather than the state it asked to leave.
				var err error
				switch name {
				case api.UpdateRolloutApprove:
					err = workflow.Await(ctx, func() bool { return r.st.State != rolloutplan.StateWaitingApproval })
				case api.UpdateRolloutRollback:
					err = workflow.Await(ctx, func() bool { return r.st.RollbackPending == nil })
				}
				return *r.st, err
			},
			workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, c rolloutplan.Command) error {
				return rolloutplan.CheckCommand(name, c, r.standing())
			}})
		if err != nil {
			return fmt.Errorf("register update %s: %w", name, err)
		}
	}
	r.windows = workflow.GetSignalChannel(ctx, api.SignalRolloutWindow)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var w api.RolloutWindow
			r.windows.Receive(ctx, &w) // a payload that does not decode is logged and dropped
			r.openWindow(ctx, w)
		}
	})
	return nil
}

// openWindow lets a scheduled rollout enable phases until the window closes.
func (r *rolloutRun) openWindow(ctx workflow.Context, w api.RolloutWindow) {
	if w.Until.After(r.st.WindowUntil) {
		r.st.WindowUntil = w.Until
		r.note(ctx, "window open until "+w.Until.UTC().Format(time.RFC3339))
	}
}

func (r *rolloutRun) standing() rolloutplan.Standing {
	return rolloutplan.Standing{State: r.st.State, Paused: r.st.Paused, Enabled: len(r.st.Enabled), Awaiting: r.st.Awaiting,
		RollbackPending: r.st.RollbackPending != nil}
}

// apply records an accepted command; the main loop acts on it.
func (r *rolloutRun) apply(ctx workflow.Context, name string, c rolloutplan.Command) {
	switch name {
	case api.UpdateRolloutPause:
		r.st.Paused = true
	case api.UpdateRolloutResume:
		r.st.Paused = false
		if r.st.State == rolloutplan.StateBlocked || r.st.State == rolloutplan.StateRolledBack {
			r.st.Retry = true
		}
	case api.UpdateRolloutRollback:
		c := c
		r.st.RollbackPending = &c
	case api.UpdateRolloutApprove:
		if r.st.Unproven != "" && r.st.Unproven == r.st.Awaiting {
			r.recordSoftQuota(ctx, c)
		}
		r.st.Awaiting = ""
	}
	text := fmt.Sprintf("%s by %s", name, c.Actor)
	if c.Phase != "" {
		text += " (phase " + c.Phase + ")"
	}
	if c.Reason != "" {
		text += ": " + c.Reason
	}
	r.note(ctx, text)
}

// note appends to the rollout's log.
func (r *rolloutRun) note(ctx workflow.Context, text string) {
	r.st.Log = keepLast(append(r.st.Log, api.RolloutEntry{At: workflow.Now(ctx), Text: text}), rolloutLogSize)
}

// keepLast drops the oldest entries beyond n.
func keepLast(log []api.RolloutEntry, n int) []api.RolloutEntry {
	if len(log) > n {
		return log[len(log)-n:]
	}
	return log
}

// publish keeps the search attributes in step with the status, so the Temporal UI can list
// rollouts by name, phase and state.
func (r *rolloutRun) publish(ctx workflow.Context) {
	phase := ""
	if r.st.Phase < len(r.plan.Phases) {
		phase = r.plan.Phases[r.st.Phase].Name
	}
	if r.shown == [2]string{phase, string(r.st.State)} {
		return
	}
	r.shown = [2]string{phase, string(r.st.State)}
	err := workflow.UpsertTypedSearchAttributes(ctx, api.SearchRolloutName.ValueSet(r.plan.Name),
		api.SearchRolloutPhase.ValueSet(phase), api.SearchRolloutState.ValueSet(string(r.st.State)))
	if err != nil {
		workflow.GetLogger(ctx).Warn("search attributes not updated", "error", err)
	}
}

// warn alerts people about the rollout (best effort: a failed alert does not stop a rollback).
func (r *rolloutRun) warn(ctx workflow.Context, level, text string) {
	actx := notifyOptions(ctx) // bounded: Slack being down never holds back a rollback
	in := notify.AlertInput{Level: level, Text: text, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID}
	if err := workflow.ExecuteActivity(actx, rem.Alert, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("alert not delivered", "error", err)
	}
}

// askApproval posts the approval request (Slack buttons when configured; best effort: the CLI and
// the Temporal CLI approve as well).
func (r *rolloutRun) askApproval(ctx workflow.Context) {
	rep := r.st.Reports[len(r.st.Reports)-1]
	in := notify.RolloutApprovalRequest{Rollout: r.plan.Name, Phase: r.st.Awaiting, Next: r.plan.Phases[r.st.Phase+1].Name,
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Channel: r.plan.SlackChannel,
		Summary: fmt.Sprintf("passed: %d claims, claim->allocated p50 %s p99 %s, allocated->ready p99 %s",
			rep.Claims, rep.ClaimToAllocated.P50, rep.ClaimToAllocated.P99, rep.AllocatedToReady.P99)}
	actx := notifyOptions(ctx)
	if err := workflow.ExecuteActivity(actx, rol.RequestRolloutApproval, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("approval request not posted", "error", err)
	}
}
