package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Migration timings that are not policy.
const (
	// MigrationLease is how long a migration Lease lasts without renewal; the holding activity renews
	// it every third of that and heartbeats, so a dead worker's migration is resumed by the next one.
	MigrationLease = time.Minute
	// waitHeartbeat bounds the silence of an activity that waits (it heartbeats every poll, 250 ms):
	// after a worker dies its wait resumes on another worker this soon.
	waitHeartbeat = 10 * time.Second
	// slotRetry re-sends a slot request that was not answered (a limiter that was reset).
	slotRetry = 10 * time.Minute
)

// migration is one run's working state.
type migrationRun struct {
	in        api.MigrateInput
	m         *migrationplan.MigrationState
	id        string
	started   time.Time
	slot      bool
	decisions workflow.Channel
	// work is cancelled when the Lease is lost; every step runs in it.
	work workflow.Context
	// full: a wait stopped because the history is full; the run continues as new.
	full bool
	// anyway is the mechanism of a person's migrate-anyway, once given.
	anyway string
	// suspended: this run asked for the Job's suspension and has not resumed it yet.
	suspended bool
	// dropStale: a grant that waits when a request starts answered an earlier one (a retried
	// request is answered again) and is dropped, or the migration would move without a slot.
	dropStale bool
}

// MigrateWorkflow (ID MigrationID) moves one workload off a quarantined device: it takes the
// workload's migration Lease, waits for a rate-limit slot and the circuit breaker, asks the workload
// to checkpoint when it can, moves it (suspend and resume a Job, evict a shard or a replicated Pod
// through the Eviction API) and waits for it to be Ready on other devices. A workload that cannot
// move without losing its work keeps its evidence and waits for a person's migrate-anyway or abandon.
func MigrateWorkflow(ctx workflow.Context, in api.MigrateInput) (migrationplan.MigrationState, error) {
	r := &migrationRun{in: in, m: &migrationplan.MigrationState{Phase: migrationplan.PhaseWaitingForSlot}, id: workflow.GetInfo(ctx).WorkflowExecution.ID,
		started: workflow.Now(ctx), decisions: workflow.NewBufferedChannel(ctx, 1)}
	if r.in.Policy.DecisionTimeout <= 0 {
		r.in.Policy.DecisionTimeout = policy.DefaultMigration().DecisionTimeout
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryState, func() (migrationplan.MigrationState, error) { return *r.m, nil }); err != nil {
		return *r.m, fmt.Errorf("register query: %w", err)
	}
	if err := r.registerDecisions(ctx); err != nil {
		return *r.m, err
	}
	r.dropStale = workflow.GetVersion(ctx, "drop-stale-grants", workflow.DefaultVersion, 1) >= 1
	// Every run continues as new from its waits once its history is full. A first run of 18bd934
	// did not; nothing it records tells it from a first run of 622d041, which did (it has no
	// marker of its own, and the same input), so the later release is the one replayed exactly.
	if c := in.Carried; c != nil {
		r.m, r.slot, r.started, r.anyway = &c.State, c.Slot, c.Started, c.Anyway
		r.in.Carried = nil
	} else {
		r.m.Mechanism = migrationplan.MoveMechanism(in.Workload.Kind, in.Workload.Shrinkable)
		r.m.Record(r.started, "%s %s/%s on %s: %s", in.Workload.Kind, in.Workload.Namespace, in.Workload.Name, in.Device, in.Report)
	}

	work, stopWork := workflow.WithCancel(ctx)
	r.work = work
	lease := migration.LeaseInput{Workload: in.Workload, Holder: r.id, Duration: MigrationLease}
	var held migration.LeaseResult
	if err := workflow.ExecuteActivity(kubeCallOptions(ctx), mig.TakeMigrationLease, lease).Get(ctx, &held); err != nil || !held.Held {
		reason := fmt.Sprintf("migration lease held by %s: another migration moves this workload", held.Holder)
		if err != nil {
			reason = "migration lease not taken: " + err.Error()
		}
		r.m.Finish(migrationplan.OutcomeFailed, migrationplan.FailNonRetryable, reason, workflow.Now(ctx))
		r.finish(ctx)
		return *r.m, nil
	}
	lost := r.holdLease(ctx, lease, stopWork)

	r.proceed()
	if r.full && *lost == "" {
		// The next run takes the Lease again (it holds it under the same workflow ID) and keeps the slot.
		stopWork()
		next := r.in
		next.Carried = &api.MigrationCarry{State: *r.m, Slot: r.slot, Started: r.started, Anyway: r.anyway}
		return *r.m, continueAsNew(ctx, MigrateWorkflow, next)
	}
	if *lost != "" && r.m.Phase != migrationplan.PhaseDone {
		if r.suspended {
			// Whoever holds the Lease now may move the workload, so it is not resumed here; but a
			// person must know it is suspended, or it may stay so.
			r.m.Finish(migrationplan.OutcomeFailed, migrationplan.FailNeedsCleanup, fmt.Sprintf("%s; the %s was suspended by this migration and is not resumed: resume it unless the Lease's holder moves it",
				*lost, strings.ToLower(r.in.Workload.Kind)), workflow.Now(ctx))
		} else {
			r.m.Finish(migrationplan.OutcomeFailed, migrationplan.FailNonRetryable, *lost, workflow.Now(ctx))
		}
	}
	stopWork()
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.ExecuteActivity(kubeCallOptions(dctx), mig.ReleaseMigrationLease, lease).Get(dctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("migration lease not released; it expires", "error", err)
	}
	r.finish(dctx)
	return *r.m, nil
}

// holdLease renews the Lease in the background; losing it cancels the work and says why.
func (r *migrationRun) holdLease(ctx workflow.Context, lease migration.LeaseInput, stopWork workflow.CancelFunc) *string {
	lost := new(string)
	p := r.in.Policy
	hctx := workflow.WithActivityOptions(r.work, workflow.ActivityOptions{
		StartToCloseTimeout: p.CheckpointTimeout.D() + 2*p.ReadyTimeout.D() + p.DecisionTimeout.D() + time.Hour,
		HeartbeatTimeout:    MigrationLease / 2,
		RetryPolicy:         backoff(migration.ErrLeaseLost),
	})
	f := workflow.ExecuteActivity(hctx, mig.HoldMigrationLease, lease)
	workflow.Go(ctx, func(gctx workflow.Context) {
		err := f.Get(gctx, nil)
		if err != nil && !temporal.IsCanceledError(err) && r.work.Err() == nil {
			*lost = "migration lease lost: " + err.Error()
			stopWork()
		}
	})
	return lost
}

// proceed takes the migration from its slot to its outcome; it returns when m is Done or the work
// was cancelled.
func (r *migrationRun) proceed() {
	ctx := r.work
	w := r.in.Workload
	if r.anyway != "" {
		r.moveAnyway()
		return
	}
	if !migrationplan.Recoverable(w.Kind, w.Checkpoint) {
		r.decide(fmt.Sprintf("a bare Pod with %s=%s: nothing recreates it and it cannot save its work", kubeobj.AnnotationCheckpoint, w.Checkpoint))
		return
	}
	if !r.acquireSlot() || !r.permit() {
		return
	}
	if w.Checkpoint == kubeobj.CheckpointAnnotation {
		ok, reason := r.checkpoint()
		if ctx.Err() != nil {
			return
		}
		if !ok {
			r.decide(reason)
			return
		}
	}
	r.move(r.m.Mechanism)
}

// acquireSlot asks the limiter and waits for its answer; the query shows the wait.
func (r *migrationRun) acquireSlot() bool {
	ctx := r.work
	if r.slot {
		return true
	}
	r.m.Phase, r.m.Waiting = migrationplan.PhaseWaitingForSlot, fmt.Sprintf("a migration slot (at most %d on node %s, %d in the cluster)",
		r.in.Policy.PerNode, r.in.Node, r.in.Policy.ClusterWide)
	req := migrationplan.SlotRequest{ID: r.id, Node: r.in.Node, PerNode: r.in.Policy.PerNode, ClusterWide: r.in.Policy.ClusterWide}
	granted := workflow.GetSignalChannel(ctx, api.SignalSlotGranted)
	for r.dropStale && granted.ReceiveAsync(nil) {
		r.m.Record(workflow.Now(ctx), "a grant of an earlier slot request dropped")
	}
	for {
		if err := workflow.ExecuteActivity(kubeCallOptions(ctx), mig.RequestMigrationSlot, req).Get(ctx, nil); err != nil {
			return false // only when cancelled: the activity retries until then
		}
		tctx, cancel := workflow.WithCancel(ctx)
		got := false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(granted, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); got = true })
		sel.AddFuture(workflow.NewTimer(tctx, slotRetry), func(workflow.Future) {})
		sel.Select(ctx)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if got {
			r.slot, r.m.SlotAt, r.m.Waiting = true, workflow.Now(ctx), ""
			r.m.Record(r.m.SlotAt, "slot granted")
			return true
		}
		if historyFull(ctx) {
			r.full = true
			return false
		}
	}
}

// releaseSlot frees the slot for the next migration.
func (r *migrationRun) releaseSlot(ctx workflow.Context) {
	if !r.slot {
		return
	}
	if err := workflow.ExecuteActivity(kubeCallOptions(ctx), mig.ReleaseMigrationSlot, r.id).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("migration slot not released", "error", err)
		return
	}
	r.slot, r.m.SlotFreedAt = false, workflow.Now(ctx)
}

// permit asks the circuit breaker, waiting while it is open.
func (r *migrationRun) permit() bool {
	ctx := r.work
	for {
		var res breaker.PermitResult
		err := executeLocal(kubeCallOptions(ctx), rem.AcquirePermit, remediation.PermitInput{Device: r.in.Device, Action: migrationplan.ActionMigrate}).Get(ctx, &res)
		if ctx.Err() != nil {
			return false
		}
		if err == nil && res.Granted {
			r.m.Waiting = ""
			return true
		}
		reason := res.Reason
		if err != nil {
			reason = "circuit breaker unreachable: " + err.Error()
		}
		r.m.Phase, r.m.Waiting = migrationplan.PhaseWaitingForBreaker, reason
		if workflow.Sleep(ctx, decide.BreakerRetry) != nil {
			return false
		}
		if historyFull(ctx) {
			r.full = true
			return false
		}
	}
}

// checkpoint asks the workload to save its work and waits for its answer up to the policy's timeout.
func (r *migrationRun) checkpoint() (bool, string) {
	ctx := r.work
	w := r.in.Workload
	r.m.Phase = migrationplan.PhaseCheckpointing
	timeout := r.in.Policy.CheckpointTimeout.D()
	r.m.Waiting = fmt.Sprintf("%s=%s on %v (up to %s)", kubeobj.AnnotationCheckpointCompleted, r.id, w.Pods, timeout)
	in := migration.CheckpointInput{Namespace: w.Namespace, Pods: w.Pods, ID: r.id}
	if err := workflow.ExecuteActivity(kubeCallOptions(ctx), mig.RequestCheckpoint, in).Get(ctx, nil); err != nil {
		return false, "checkpoint not requested: " + err.Error()
	}
	asked := workflow.Now(ctx)
	r.m.Record(asked, "checkpoint requested")
	wctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	wait := workflow.ExecuteActivity(workflow.WithActivityOptions(wctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout + time.Minute, HeartbeatTimeout: waitHeartbeat,
		RetryPolicy: backoff()}), mig.WaitCheckpoint, in)
	var st migration.CheckpointStatus
	var err error
	answered := false
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(wait, func(f workflow.Future) { err = f.Get(ctx, &st); answered = true })
	sel.AddFuture(workflow.NewTimer(wctx, timeout), func(workflow.Future) {})
	sel.Select(ctx)
	r.m.Waiting = ""
	switch {
	case !answered:
		return false, fmt.Sprintf("no checkpoint within %s", timeout)
	case err != nil:
		return false, "checkpoint not read: " + err.Error()
	case !st.Done:
		return false, fmt.Sprintf("the workload's Pods are gone before answering (%v)", st.Gone)
	}
	r.m.CheckpointWait = policy.JSONDuration(workflow.Now(ctx).Sub(asked))
	r.m.Record(workflow.Now(ctx), "checkpoint completed after %s", r.m.CheckpointWait.D())
	return true, ""
}

// decide keeps the evidence, tells the tenant, frees the slot and waits for a person's decision.
func (r *migrationRun) decide(reason string) {
	ctx := r.work
	w := r.in.Workload
	r.releaseSlot(ctx)
	r.m.Record(workflow.Now(ctx), "not moved: %s", reason)
	var name string
	ev := migration.EvidenceInput{WorkflowID: r.id, Device: r.in.Device, Workload: w, Report: r.in.Report, Keep: r.in.Policy.EvidenceKeep.D()}
	if err := workflow.ExecuteActivity(kubeCallOptions(ctx), mig.PreserveEvidence, ev).Get(ctx, &name); err != nil {
		if ctx.Err() == nil {
			r.m.Finish(migrationplan.OutcomeFailed, migrationplan.FailRetryable, "evidence not kept: "+err.Error(), workflow.Now(ctx))
		}
		return
	}
	r.m.Evidence = name
	timeout := r.in.Policy.DecisionTimeout.D()
	channel := r.in.Policy.TenantChannels[w.Namespace]
	if channel == "" {
		channel = r.in.Channel
	}
	r.notify(ctx, decide.LevelWarning, channel, fmt.Sprintf("%s %s/%s was not moved off failed device %s: %s. Evidence in ConfigMap %s. Decide within %s: devicewarden migration migrate-anyway|abandon %s",
		w.Kind, w.Namespace, w.Name, r.in.Device, reason, name, timeout, r.id))
	r.m.Phase, r.m.Waiting = migrationplan.PhaseWaitingForDecision, fmt.Sprintf("migrate-anyway or abandon (until %s)", workflow.Now(ctx).Add(timeout).UTC().Format(time.RFC3339))
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	var d decision
	timedOut := false
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(r.decisions, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &d) })
	sel.AddFuture(workflow.NewTimer(tctx, timeout), func(workflow.Future) { timedOut = true })
	sel.Select(ctx)
	switch {
	case ctx.Err() != nil:
	case timedOut:
		r.m.Finish(migrationplan.OutcomeEvidencePreserved, "", fmt.Sprintf("%s; nobody decided within %s", reason, timeout), workflow.Now(ctx))
	case d.kind == api.UpdateAbandon:
		r.m.Actor = d.Actor
		r.m.Finish(migrationplan.OutcomeAbandoned, "", fmt.Sprintf("left on the device by %s: %s", d.Actor, d.Reason), workflow.Now(ctx))
	default:
		r.m.Actor = d.Actor
		r.m.Record(workflow.Now(ctx), "migrate anyway, by %s: %s", d.Actor, d.Reason)
		r.anyway = r.m.Mechanism
		if r.anyway == migrationplan.MoveNone {
			r.anyway = migrationplan.MoveEvict // a bare Pod: gone once evicted, on this person's word
		}
		r.moveAnyway()
	}
}

// moveAnyway moves the workload on a person's word, once it has a slot and the breaker's permit.
func (r *migrationRun) moveAnyway() {
	if r.acquireSlot() && r.permit() {
		r.move(r.anyway)
	}
}

// move suspends (and resumes) a Job or evicts the Pods on the device, then waits for the workload
// to be Ready elsewhere.
func (r *migrationRun) move(mech string) {
	ctx := r.work
	w := r.in.Workload
	r.m.Phase, r.m.Mechanism = migrationplan.PhaseMoving, mech
	var before []migration.PodInfo
	if err := workflow.ExecuteActivity(kubeCallOptions(ctx), mig.WorkloadPods, w).Get(ctx, &before); err != nil {
		r.failUnlessCancelled(migrationplan.FailRetryable, "workload's Pods not listed: "+err.Error())
		return
	}
	if mech == migrationplan.MoveSuspend {
		if !r.suspendAndResume(before) {
			return
		}
	} else if !r.evict(before) {
		return
	}
	if w.Kind == "Pod" {
		r.m.Finish(migrationplan.OutcomeMigrated, "", fmt.Sprintf("evicted on %s's word; nothing recreates a bare Pod", r.m.Actor), workflow.Now(ctx))
		return
	}
	r.m.Phase = migrationplan.PhaseWaitingForReady
	timeout := r.in.Policy.ReadyTimeout.D()
	r.m.Waiting = fmt.Sprintf("%d new Pod(s) Ready on other devices (up to %s)", len(w.Pods), timeout)
	in := migration.ReadyInput{Workload: w, Device: r.in.Device, Before: before, Want: len(w.Pods)}
	wctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ScheduleToCloseTimeout: timeout, StartToCloseTimeout: timeout,
		HeartbeatTimeout: waitHeartbeat, RetryPolicy: backoff()})
	var ready []string
	if err := workflow.ExecuteActivity(wctx, mig.WaitWorkloadReady, in).Get(ctx, &ready); err != nil {
		r.failUnlessCancelled(migrationplan.FailRetryable, fmt.Sprintf("not Ready on other devices within %s: %v", timeout, err))
		return
	}
	r.m.Ready = ready
	r.m.Finish(migrationplan.OutcomeMigrated, "", fmt.Sprintf("Ready on other devices: %v", ready), workflow.Now(ctx))
}

func (r *migrationRun) suspendAndResume(before []migration.PodInfo) bool {
	ctx := r.work
	w := r.in.Workload
	actx := kubeCallOptions(ctx)
	suspend := migration.SuspendInput{Namespace: w.Namespace, Job: w.Name, Suspend: true}
	if w.Kind == "JobSet" {
		suspend.Kind, suspend.APIVersion = w.Kind, w.APIVersion
	}
	r.suspended = true // from the call on: one cut short may have suspended it
	if err := workflow.ExecuteActivity(actx, mig.SuspendJob, suspend).Get(ctx, nil); err != nil {
		r.failUnlessCancelled(migrationplan.FailNeedsCleanup, strings.ToLower(w.Kind)+" not suspended (it may be): "+err.Error())
		return false
	}
	r.m.Record(workflow.Now(ctx), "%s suspended", strings.ToLower(w.Kind))
	gctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: r.in.Policy.ReadyTimeout.D(),
		HeartbeatTimeout: waitHeartbeat, RetryPolicy: backoff()})
	gone := workflow.ExecuteActivity(gctx, mig.WaitPodsGone, migration.WaitGoneInput{Namespace: w.Namespace, Pods: before}).Get(ctx, nil)
	// Resume even when the Pods did not go: a Job left suspended is the worse outcome.
	resume := suspend
	resume.Suspend = false
	resumed := workflow.ExecuteActivity(actx, mig.SuspendJob, resume).Get(ctx, nil)
	r.suspended = resumed != nil
	switch {
	case resumed != nil:
		r.failUnlessCancelled(migrationplan.FailNeedsCleanup, strings.ToLower(w.Kind)+" left suspended: "+resumed.Error())
		return false
	case gone != nil:
		r.failUnlessCancelled(migrationplan.FailRetryable, strings.ToLower(w.Kind)+"'s Pods did not go: "+gone.Error())
		return false
	}
	for _, p := range before {
		r.m.Moved = append(r.m.Moved, p.Name)
	}
	r.m.Record(workflow.Now(ctx), "%s resumed; its Pods %v are gone", strings.ToLower(w.Kind), r.m.Moved)
	return true
}

// evict evicts the workload's Pods on the device, retrying a budget's refusal until the ready timeout.
func (r *migrationRun) evict(before []migration.PodInfo) bool {
	ctx := r.work
	w := r.in.Workload
	uids := map[string]string{}
	for _, p := range before {
		uids[p.Name] = p.UID
	}
	ectx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
		ScheduleToCloseTimeout: r.in.Policy.ReadyTimeout.D(),
		RetryPolicy:            backoff()})
	for _, pod := range w.Pods {
		uid, ok := uids[pod]
		if !ok {
			continue // gone already
		}
		r.m.Waiting = "eviction of " + pod + " (PodDisruptionBudgets respected)"
		if err := workflow.ExecuteActivity(ectx, mig.EvictPod, migration.EvictInput{Namespace: w.Namespace, Pod: pod, UID: uid}).Get(ctx, nil); err != nil {
			r.failUnlessCancelled(migrationplan.FailRetryable, "eviction of "+pod+" not allowed: "+err.Error())
			return false
		}
		r.m.Moved = append(r.m.Moved, pod)
		r.m.Record(workflow.Now(ctx), "pod %s evicted", pod)
	}
	r.m.Waiting = ""
	return true
}

func (r *migrationRun) failUnlessCancelled(class migrationplan.FailureClass, reason string) {
	if r.work.Err() == nil {
		r.m.Finish(migrationplan.OutcomeFailed, class, reason, workflow.Now(r.work))
	}
}

// finish frees the slot, counts the outcome and alerts on it.
func (r *migrationRun) finish(ctx workflow.Context) {
	r.releaseSlot(ctx)
	now := workflow.Now(ctx)
	rec := migration.MigrationRecord{Outcome: r.m.Outcome, Class: r.m.Class, Duration: now.Sub(r.started), CheckpointWait: r.m.CheckpointWait.D()}
	if r.m.Outcome == migrationplan.OutcomeMigrated && !r.in.QuarantinedAt.IsZero() {
		rec.OnDevice = now.Sub(r.in.QuarantinedAt)
	}
	if err := workflow.ExecuteActivity(notifyOptions(ctx), mig.RecordMigration, rec).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("migration not counted", "error", err)
	}
	level := decide.LevelWarning
	switch {
	case r.m.Outcome == migrationplan.OutcomeMigrated:
		level = decide.LevelInfo
	case r.m.Class == migrationplan.FailNeedsCleanup:
		level = decide.LevelCritical
	}
	w := r.in.Workload
	outcome := string(r.m.Outcome)
	if r.m.Class != "" {
		outcome += " (" + string(r.m.Class) + ")"
	}
	r.notify(ctx, level, r.in.Channel, fmt.Sprintf("migration %s: %s %s/%s off device %s: %s", outcome, w.Kind, w.Namespace, w.Name, r.in.Device, r.m.Reason))
}

func (r *migrationRun) notify(ctx workflow.Context, level, channel, text string) {
	in := notify.AlertInput{Device: r.in.Device, Level: level, Text: text, WorkflowID: r.id, Channel: channel}
	if err := workflow.ExecuteActivity(notifyOptions(ctx), rem.Alert, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("alert not delivered", "error", err)
	}
}

// decision is a person's word, handed from an update to the main flow.
type decision struct {
	kind string
	migrationplan.MigrationDecision
}

// registerDecisions makes migrate-anyway and abandon updates, validated against the phase.
func (r *migrationRun) registerDecisions(ctx workflow.Context) error {
	for _, kind := range []string{api.UpdateMigrateAnyway, api.UpdateAbandon} {
		kind := kind
		err := workflow.SetUpdateHandlerWithOptions(ctx, kind,
			func(ctx workflow.Context, d migrationplan.MigrationDecision) (migrationplan.MigrationState, error) {
				r.decisions.Send(ctx, decision{kind: kind, MigrationDecision: d})
				err := workflow.Await(ctx, func() bool { return r.m.Phase != migrationplan.PhaseWaitingForDecision })
				return *r.m, err
			},
			workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, d migrationplan.MigrationDecision) error {
				if r.decisions.Len() > 0 {
					return errors.New("a decision is already being applied")
				}
				return r.m.ValidateDecision(d)
			}})
		if err != nil {
			return fmt.Errorf("register update %s: %w", kind, err)
		}
	}
	return nil
}
