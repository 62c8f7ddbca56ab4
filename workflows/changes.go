package workflows

import "go.temporal.io/sdk/workflow"

// The device workflow's changes, each guarded by workflow.GetVersion so that runs recorded before
// it replay without it: release-path, stale-grace, breaker-wake, failed-probe-holds, local-taint,
// node-escalation and migrate. Every GetVersion a run takes records a marker and upserts the
// TemporalChangeVersion search attribute (a visibility write on the server), seven per device
// that is quarantined. A run started now takes them all at once, through one change.
const deviceChanges = "device-changes-2026-12"

type changesKey struct{}

// withChanges asks once whether this run takes every change (a run started by this code) or
// decides each as its history says (a run recorded before).
func withChanges(ctx workflow.Context) workflow.Context {
	all := workflow.GetVersion(ctx, deviceChanges, workflow.DefaultVersion, 1) >= 1
	return workflow.WithValue(ctx, changesKey{}, all)
}

// changed reports whether the run takes the change: always in a run that takes them all,
// else as its own GetVersion says.
func changed(ctx workflow.Context, change string) bool {
	if all, _ := ctx.Value(changesKey{}).(bool); all {
		return true
	}
	return workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1) >= 1
}
