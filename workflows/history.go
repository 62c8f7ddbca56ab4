package workflows

import "go.temporal.io/sdk/workflow"

// historyBound is the history length (events) at which a long-lived run continues as new even
// when the server does not suggest it: a cluster with the suggestion set higher or turned off.
// Temporal warns at 10,240 events and terminates a run at 51,200.
const historyBound = 10_000

// historyFull says whether a run should continue as new: the server suggests it (by default at
// 4,096 events or 4 MiB) or its history reached historyBound. Every loop that can outlive an hour
// asks it where the run's whole state is in its input. A run of a release before the bound
// (suggestionOnly) goes by the suggestion alone.
func historyFull(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	if only, _ := ctx.Value(suggestionOnlyKey{}).(bool); only {
		return info.GetContinueAsNewSuggested()
	}
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= historyBound
}

type suggestionOnlyKey struct{}

// suggestionOnly marks a run recorded by a release before historyBound (68a18d5; 18bd934 was the
// last such release), known by a version marker it lacks: it continued as new when the server
// suggested it and never at the bound, and replayed here it must do the same where a cluster
// suggests later than the bound, or not at all.
func suggestionOnly(ctx workflow.Context) workflow.Context {
	return workflow.WithValue(ctx, suggestionOnlyKey{}, true)
}

// handlersDone waits until the run's update and signal handlers are done, so an accepted update
// is answered by this run, never dropped. A loop that takes signals looks at them again after it:
// one may have come while the handlers finished.
func handlersDone(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
}

// continueAsNew ends the run once its handlers are done and starts the next with input. Every
// long-lived loop ends its run here.
func continueAsNew(ctx workflow.Context, fn any, input any) error {
	if err := handlersDone(ctx); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, fn, input)
}
