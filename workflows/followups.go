package workflows

import "go.temporal.io/sdk/workflow"

// followUps are the notices an execution sends once its decision is carried out: the alerts and
// the node's failure report. From device-changes v5 they are scheduled together and waited for
// after an operator's command is answered, so the answer does not wait for Slack or the node.
type followUps struct {
	pending []followUp
}

type followUp struct {
	what string
	f    workflow.Future
}

type followUpsKey struct{}

// withFollowUps gathers the run's notices in ctx when the run takes v5; without it, each notice
// is waited for where it is sent, as older runs did.
func withFollowUps(ctx workflow.Context) (workflow.Context, *followUps) {
	if !takes(ctx, 5) {
		return ctx, nil
	}
	fu := &followUps{}
	return workflow.WithValue(ctx, followUpsKey{}, fu), fu
}

// notice waits for f, or leaves it to the gatherer in ctx; a failure is logged as what.
func notice(ctx workflow.Context, what string, f workflow.Future) {
	if fu, ok := ctx.Value(followUpsKey{}).(*followUps); ok && fu != nil {
		fu.pending = append(fu.pending, followUp{what: what, f: f})
		return
	}
	if err := f.Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn(what, "error", err)
	}
}

// wait waits for every gathered notice and logs those that failed.
func (fu *followUps) wait(ctx workflow.Context) {
	if fu == nil {
		return
	}
	for _, p := range fu.pending {
		if err := p.f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn(p.what, "error", err)
		}
	}
	fu.pending = nil
}
