package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// NodeWorkflow (ID "node/<name>") collects device failures on one node and escalates once when a
// policy threshold of them failed. It records and alerts; it never cordons or drains.
func NodeWorkflow(ctx workflow.Context, in api.NodeInput) error {
	st := in.State
	if st == nil {
		st = &escalation.NodeState{Node: in.Node}
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryState, func() (escalation.NodeState, error) { return *st, nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}})
	ch := workflow.GetSignalChannel(ctx, api.SignalDeviceFailed)
	for {
		var f escalation.NodeFailure
		ch.Receive(ctx, &f)
		for _, act := range st.Fail(f, workflow.Now(ctx)) {
			in := notify.AlertInput{Level: act.Level, Text: act.Reason, WorkflowID: api.NodeWorkflowID(st.Node), Node: st.Node}
			if err := workflow.ExecuteActivity(actx, rem.Alert, in).Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Warn("alert not delivered", "error", err)
			}
		}
		if ch.Len() == 0 && historyFull(ctx) {
			return continueAsNew(ctx, NodeWorkflow, api.NodeInput{Node: st.Node, State: st})
		}
	}
}
