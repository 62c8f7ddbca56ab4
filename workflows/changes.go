package workflows

import "go.temporal.io/sdk/workflow"

// The device workflow's changes, each guarded by workflow.GetVersion so that runs recorded before
// it replay without it: release-path, stale-grace, breaker-wake, failed-probe-holds, local-taint,
// node-escalation and migrate. Every GetVersion a run takes records a marker and upserts the
// TemporalChangeVersion search attribute (a visibility write on the server), seven per device
// that is quarantined. A run started now takes them all at once, through one change, whose
// versions add what came after: 1 is the seven; 2 also sends alerts as local activities.
const deviceChanges = "device-changes-2026-12"

type changesKey struct{}

// withChanges asks once which of the changes this run takes: all of them up to the newest (a
// run started by this code), or each as its history says (a run recorded before).
func withChanges(ctx workflow.Context) workflow.Context {
	v := workflow.GetVersion(ctx, deviceChanges, workflow.DefaultVersion, 2)
	return workflow.WithValue(ctx, changesKey{}, v)
}

// changes is the version of deviceChanges the run took (DefaultVersion: a run recorded before).
func changes(ctx workflow.Context) workflow.Version {
	v, _ := ctx.Value(changesKey{}).(workflow.Version)
	return v
}

// changed reports whether the run takes one of the seven changes: always in a run that took
// deviceChanges, else as its own GetVersion says.
func changed(ctx workflow.Context, change string) bool {
	if changes(ctx) >= 1 {
		return true
	}
	return workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1) >= 1
}
