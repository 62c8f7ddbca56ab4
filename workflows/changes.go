package workflows

import "go.temporal.io/sdk/workflow"

// The device workflow's changes, each guarded by workflow.GetVersion so that runs recorded before
// it replay without it: release-path, stale-grace, breaker-wake, failed-probe-holds, local-taint,
// node-escalation and migrate. Every GetVersion a run takes records a marker and upserts the
// TemporalChangeVersion search attribute (a visibility write on the server), seven per device
// that is quarantined. A run started now takes them all at once, through one change.
//
// Later changes raise that change's version, so a run still takes one marker:
//   - 2: a device the breaker holds hands its alert to the worker, which sends the alerts of
//     held devices together (heldAlerts), instead of running one Alert activity each.
//   - 3: the alerts a fleet-wide event raises on many devices at once (Action.Gather: an
//     Unknown report tolerated, Healthy again in the window) go to the worker's summary the
//     same way, through the local activity NoteAlert.
//   - 4: an automatic taint takes its permit and creates its rule in one local activity
//     (QuarantineWithPermit) instead of AcquirePermit then Quarantine: one marker, one call.
//   - 5: the alerts and the node report an execution sends are scheduled together and waited
//     for after an operator's command is answered (followUps), not one after the other before.
//   - 6: the search attributes (state, a unit's forms) are written with the answer, before the
//     notices are waited for: at v5 a form's next command could look its unit up too early.
//   - 7: a shared unit's silent holders (Pods on a form that reported nothing) are no evidence:
//     their Healthy neither starts a restricted unit's review nor skips its probe and canary.
//   - 8: a quarantine climbs its policy's repair ladder (decide.Ladder), and a device can be
//     Retired; a run without a ladder in its policy decides as at v7.
//   - 9: a failed repair try sends a warning that says what comes next (decide.Rules.StepAlerts).
//   - 10: the ladder's rare paths (decide.Rules.LadderTrust): an approval is bound to the ask
//     waiting when it was accepted and checked again where it is applied, a step that never ran
//     is asked for again, retireAfter counts faults only, a retired device's review never ends
//     in a release without a person.
//   - 11: a report observed before the review that follows a passed repair step began (a node's
//     Unknown while it rebooted) does not fail that review (decide.Rules.StepReports).
//   - 12: only a Pod holds a device: a detector's word (the driver's taint, a health report)
//     does not keep the ladder from its next try (decide.Rules.DetectorsNotHolders).
//   - 13: a fault's cause chooses its first step (decide.Rules.Causes): an application's fault
//     is not fenced until they pile up, the ladder starts at the step the cause asks for, and a
//     replace fault is retired at once.
//   - 14: proof from the source (decide.Rules.SourceProof): a review whose checks passed waits for
//     the sources that reported the fault to say Healthy before the device is released.
//   - 15: a ladder whose reset the breaker refused for its budget takes its try when the breaker
//     wakes it, as a reset ends (decide.Rules.ResetWake).
//   - 16: a policy carried from a run before sourceWait existed waits the default, not 0
//     (decide.Rules.CarriedDefaults); a source that still says node reboot when a review after a
//     reset fails brings the node step (decide.Rules.SourceVerdict); uncorrectable remapped rows
//     start at a reset, which applies the remap, instead of retiring the GPU (RemapsReset); a
//     step's approval asked again for the same try carries an ID of its own (FreshAsks); an
//     observation sent before its watcher read Prometheus keeps the words that stand
//     (KeepsStanding).
//   - 17: a device's history outlives its run (decision 0008, decide.Rules.History): its
//     closed quarantines and application faults are read from its node's record before the
//     run's first decision on a fault and written back before it ends; an Unhealthy report of
//     one-time words the device took before (a new leader re-sends what its predecessor
//     delivered) is no new fault (decide.Rules.TakenWords).
//   - 18: a check or repair step that did not run (its image not pulled, its Pod never scheduled
//     or evicted, its tool's not-run exit code, its activity failing every attempt) is the
//     tooling's failure: taken again later, a person alerted after the policy's
//     notRunAlertAfter, never a failed review or try (decide.Rules.NotRunRetries).
const deviceChanges = "device-changes-2026-12"

// deviceChangesNow is the version of deviceChanges that runs started by this code take.
const deviceChangesNow workflow.Version = 18

type changesKey struct{}

// withChanges asks once which of the changes this run takes: every one (a run started by this
// code), those up to the version its history recorded, or each as its own GetVersion says (a
// run recorded before the changes were gathered).
func withChanges(ctx workflow.Context) workflow.Context {
	v := workflow.GetVersion(ctx, deviceChanges, workflow.DefaultVersion, deviceChangesNow)
	return workflow.WithValue(ctx, changesKey{}, v)
}

// changed reports whether the run takes one of the first changes: always in a run that took
// deviceChanges, else as its own GetVersion says.
func changed(ctx workflow.Context, change string) bool {
	if v, ok := ctx.Value(changesKey{}).(workflow.Version); ok && v >= 1 {
		return true
	}
	return workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1) >= 1
}

// takes reports whether the run takes the changes of deviceChanges version v (2 and later).
func takes(ctx workflow.Context, v workflow.Version) bool {
	got, ok := ctx.Value(changesKey{}).(workflow.Version)
	return ok && got >= v
}
