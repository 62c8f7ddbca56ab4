package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// mharness runs MigrateWorkflow with every activity mocked; its fields shape what the cluster does.
type mharness struct {
	env   *testsuite.TestWorkflowEnvironment
	calls []string
	// holder, when set, holds the Lease already.
	holder string
	// checkpointNever: the workload never answers; readyNever: no Pod gets Ready elsewhere.
	checkpointNever, readyNever, resumeFails, evidenceFails bool
	// evictBlocked budget refusals before the eviction goes through; loseLeaseAfter renewals
	// before another holder takes the Lease (0 = never).
	evictBlocked, loseLeaseAfter, denyPermits int
	suspends                                  []bool
	suspendKinds                              []string
	alerts                                    []notify.AlertInput
	records                                   []migration.MigrationRecord
	slotReleased                              int
}

func newMigration(t *testing.T) *mharness {
	var s testsuite.WorkflowTestSuite
	h := &mharness{env: s.NewTestWorkflowEnvironment()}
	env := h.env
	registerActivities(env)
	on := func(name string, fn any) { env.OnActivity(name, mock.Anything, mock.Anything).Return(fn) }
	on("TakeMigrationLease", func(_ context.Context, in migration.LeaseInput) (migration.LeaseResult, error) {
		h.calls = append(h.calls, "TakeMigrationLease")
		if h.holder != "" {
			return migration.LeaseResult{Holder: h.holder}, nil
		}
		return migration.LeaseResult{Held: true, Holder: in.Holder}, nil
	})
	renewals := 0
	on("HoldMigrationLease", func(context.Context, migration.LeaseInput) error {
		renewals++
		if h.loseLeaseAfter > 0 && renewals > h.loseLeaseAfter {
			return temporal.NewNonRetryableApplicationError("migration lease taken by someone-else", migration.ErrLeaseLost, nil)
		}
		if h.loseLeaseAfter > 0 {
			return errors.New("renewal failed") // retried after a backoff timer: time passes
		}
		return nil
	})
	on("ReleaseMigrationLease", func(context.Context, migration.LeaseInput) error {
		h.calls = append(h.calls, "ReleaseMigrationLease")
		return nil
	})
	on("RequestMigrationSlot", func(_ context.Context, req migrationplan.SlotRequest) error {
		h.calls = append(h.calls, "RequestMigrationSlot")
		return nil
	})
	on("ReleaseMigrationSlot", func(context.Context, string) error {
		h.slotReleased++
		h.calls = append(h.calls, "ReleaseMigrationSlot")
		return nil
	})
	on("AcquirePermit", func(_ context.Context, in remediation.PermitInput) (breaker.PermitResult, error) {
		if in.Action != migrationplan.ActionMigrate {
			t.Errorf("permit asked for %s, want %s", in.Action, migrationplan.ActionMigrate)
		}
		h.calls = append(h.calls, "AcquirePermit")
		if h.denyPermits > 0 {
			h.denyPermits--
			return breaker.PermitResult{Reason: "circuit breaker open: test"}, nil
		}
		return breaker.PermitResult{Granted: true}, nil
	})
	on("RequestCheckpoint", func(_ context.Context, in migration.CheckpointInput) error {
		h.calls = append(h.calls, "RequestCheckpoint")
		return nil
	})
	on("WaitCheckpoint", func(_ context.Context, in migration.CheckpointInput) (migration.CheckpointStatus, error) {
		if h.checkpointNever {
			return migration.CheckpointStatus{}, later("still waiting")
		}
		h.calls = append(h.calls, "WaitCheckpoint")
		return migration.CheckpointStatus{Done: true}, nil
	})
	on("PreserveEvidence", func(_ context.Context, in migration.EvidenceInput) (string, error) {
		h.calls = append(h.calls, "PreserveEvidence")
		if h.evidenceFails {
			return "", temporal.NewNonRetryableApplicationError("configmaps is forbidden", "Test", nil)
		}
		return migration.EvidenceName(in.WorkflowID), nil
	})
	on("Alert", func(_ context.Context, in notify.AlertInput) error {
		h.alerts = append(h.alerts, in)
		return nil
	})
	on("WorkloadPods", func(_ context.Context, w api.Workload) ([]migration.PodInfo, error) {
		var out []migration.PodInfo
		for _, p := range w.Pods {
			out = append(out, migration.PodInfo{Name: p, UID: "uid-" + p})
		}
		return out, nil
	})
	on("SuspendJob", func(_ context.Context, in migration.SuspendInput) error {
		h.suspends = append(h.suspends, in.Suspend)
		h.suspendKinds = append(h.suspendKinds, in.Kind+" "+in.APIVersion)
		h.calls = append(h.calls, "SuspendJob")
		if !in.Suspend && h.resumeFails {
			return temporal.NewNonRetryableApplicationError("forbidden", "Test", nil)
		}
		return nil
	})
	on("WaitPodsGone", func(context.Context, migration.WaitGoneInput) error {
		h.calls = append(h.calls, "WaitPodsGone")
		return nil
	})
	on("EvictPod", func(_ context.Context, in migration.EvictInput) error {
		if in.UID != "uid-"+in.Pod {
			t.Errorf("eviction of %s pinned to uid %q", in.Pod, in.UID)
		}
		if h.evictBlocked > 0 {
			h.evictBlocked--
			return temporal.NewApplicationError("cannot evict: disruption budget", migration.ErrEvictionBlocked)
		}
		h.calls = append(h.calls, "EvictPod")
		return nil
	})
	on("WaitWorkloadReady", func(_ context.Context, in migration.ReadyInput) ([]string, error) {
		if h.readyNever {
			return nil, later("not ready yet")
		}
		h.calls = append(h.calls, "WaitWorkloadReady")
		return []string{"train-new"}, nil
	})
	on("RecordMigration", func(_ context.Context, r migration.MigrationRecord) error {
		h.records = append(h.records, r)
		return nil
	})
	return h
}

// later fails an attempt to be retried 5 minutes on: time passes without the test environment's
// cap of 10 attempts ending the wait first.
func later(msg string) error {
	return temporal.NewApplicationErrorWithOptions(msg, "Test", temporal.ApplicationErrorOptions{NextRetryDelay: 5 * time.Minute})
}

func migrateInput(kind, checkpoint string, shrinkable bool) api.MigrateInput {
	p := policy.DefaultMigration()
	p.Enabled = true
	p.TenantChannels = map[string]string{"team-a": "#team-a"}
	return api.MigrateInput{Device: gpu0, Node: "node-1", StatusVersion: "42", Report: "XID 79", Policy: p, Channel: "#gpu-ops",
		QuarantinedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Workload: api.Workload{Kind: kind, APIVersion: "batch/v1", Namespace: "team-a", Name: "train", UID: "w-1",
			Pods: []string{"train-0"}, Checkpoint: checkpoint, Shrinkable: shrinkable}}
}

// grant answers the slot request after d.
func (h *mharness) grant(d time.Duration) {
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(api.SignalSlotGranted, nil) }, d)
}

func (h *mharness) run(t *testing.T, in api.MigrateInput) migrationplan.MigrationState {
	t.Helper()
	h.env.ExecuteWorkflow(MigrateWorkflow, in)
	if err := h.env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	var st migrationplan.MigrationState
	if err := h.env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (h *mharness) called(names ...string) string {
	var got []string
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, c := range h.calls {
		if want[c] {
			got = append(got, c)
		}
	}
	return strings.Join(got, ",")
}

func TestMigrateCheckpointedJob(t *testing.T) {
	h := newMigration(t)
	h.grant(time.Minute)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryState)
		var st migrationplan.MigrationState
		if err != nil || v.Get(&st) != nil || st.Phase != migrationplan.PhaseWaitingForSlot || !strings.Contains(st.Waiting, "at most 1 on node node-1, 10 in the cluster") {
			t.Errorf("while waiting for a slot the query shows %+v (%v)", st, err)
		}
	}, 30*time.Second)
	st := h.run(t, migrateInput("Job", "annotation", false))
	if st.Outcome != migrationplan.OutcomeMigrated || st.Mechanism != migrationplan.MoveSuspend || len(st.Ready) != 1 {
		t.Fatalf("state %+v", st)
	}
	want := "TakeMigrationLease,RequestMigrationSlot,AcquirePermit,RequestCheckpoint,WaitCheckpoint,SuspendJob,WaitPodsGone,SuspendJob,WaitWorkloadReady,ReleaseMigrationLease,ReleaseMigrationSlot"
	if got := strings.Join(h.calls, ","); got != want {
		t.Fatalf("calls\n got %s\nwant %s", got, want)
	}
	if len(h.suspends) != 2 || !h.suspends[0] || h.suspends[1] {
		t.Fatalf("suspends %v, want suspend then resume", h.suspends)
	}
	if !st.SlotAt.Equal(time.Date(2026, 11, 30, 12, 1, 0, 0, time.UTC)) && st.SlotAt.IsZero() {
		t.Fatalf("slot at %s", st.SlotAt)
	}
	if st.SlotFreedAt.IsZero() || st.SlotFreedAt.Before(st.SlotAt) {
		t.Fatalf("slot held %s..%s", st.SlotAt, st.SlotFreedAt)
	}
	if len(h.records) != 1 || h.records[0].Outcome != migrationplan.OutcomeMigrated || h.records[0].Duration < time.Minute {
		t.Fatalf("records %+v", h.records)
	}
	if n := len(h.alerts); n != 1 || h.alerts[0].Level != decide.LevelInfo || !strings.HasPrefix(h.alerts[0].Text, "migration migrated: Job team-a/train") {
		t.Fatalf("alerts %+v", h.alerts)
	}
}

// A workload that does not answer in time is not moved: evidence, the tenant's channel, and a
// person's decision, which nobody gives: it stays where it is with its evidence.
func TestMigrateCheckpointTimeoutKeepsEvidence(t *testing.T) {
	h := newMigration(t)
	h.checkpointNever = true
	h.grant(time.Second)
	in := migrateInput("Job", "annotation", false)
	h.env.RegisterDelayedCallback(func() {
		v, _ := h.env.QueryWorkflow(api.QueryState)
		var st migrationplan.MigrationState
		_ = v.Get(&st)
		if st.Phase != migrationplan.PhaseCheckpointing {
			t.Errorf("9 minutes in: %s, want still checkpointing", st.Phase)
		}
	}, 9*time.Minute)
	h.env.RegisterDelayedCallback(func() {
		v, _ := h.env.QueryWorkflow(api.QueryState)
		var st migrationplan.MigrationState
		_ = v.Get(&st)
		if st.Phase != migrationplan.PhaseWaitingForDecision || h.slotReleased != 1 {
			t.Errorf("11 minutes in: %s, slot released %d times; want waiting for a decision with the slot freed", st.Phase, h.slotReleased)
		}
	}, 11*time.Minute)
	st := h.run(t, in)
	if st.Outcome != migrationplan.OutcomeEvidencePreserved || !strings.Contains(st.Reason, "no checkpoint within 10m0s") ||
		!strings.Contains(st.Reason, "nobody decided within 24h0m0s") || st.Evidence == "" {
		t.Fatalf("state %+v", st)
	}
	if got := h.called("SuspendJob", "EvictPod"); got != "" {
		t.Fatalf("moved anyway: %s", got)
	}
	if len(h.alerts) != 2 || h.alerts[0].Channel != "#team-a" || !strings.Contains(h.alerts[0].Text, "devicewarden migration migrate-anyway|abandon") {
		t.Fatalf("tenant alert %+v", h.alerts)
	}
	if h.alerts[1].Channel != "#gpu-ops" || !strings.HasPrefix(h.alerts[1].Text, "migration evidence-preserved:") {
		t.Fatalf("outcome alert %+v", h.alerts[1])
	}
}

func decideOn(t *testing.T, h *mharness, at time.Duration, kind string, d migrationplan.MigrationDecision, wantErr string) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(kind, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) {
				if wantErr == "" || !strings.Contains(err.Error(), wantErr) {
					t.Errorf("%s rejected: %v", kind, err)
				}
			},
			OnAccept:   func() {},
			OnComplete: func(any, error) {},
		}, d)
	}, at)
}

// A bare Pod that cannot checkpoint waits for a person; abandon leaves it, unsigned words are refused.
func TestMigrateBarePodAbandoned(t *testing.T) {
	h := newMigration(t)
	decideOn(t, h, time.Minute, api.UpdateAbandon, migrationplan.MigrationDecision{}, "actor is required")
	decideOn(t, h, 2*time.Minute, api.UpdateAbandon, migrationplan.MigrationDecision{Actor: "alice", Reason: "results are not needed"}, "")
	in := migrateInput("Pod", "none", false)
	st := h.run(t, in)
	if st.Outcome != migrationplan.OutcomeAbandoned || st.Actor != "alice" || !strings.Contains(st.Reason, "results are not needed") {
		t.Fatalf("state %+v", st)
	}
	if got := h.called("RequestMigrationSlot", "EvictPod", "PreserveEvidence"); got != "PreserveEvidence" {
		t.Fatalf("calls %s: a bare Pod waits for a person without a slot", got)
	}
}

// migrate-anyway evicts the bare Pod; a second decision is refused once the first was taken.
func TestMigrateAnywayEvictsBarePod(t *testing.T) {
	h := newMigration(t)
	decideOn(t, h, time.Minute, api.UpdateMigrateAnyway, migrationplan.MigrationDecision{Actor: "bob"}, "")
	h.grant(2 * time.Minute)
	decideOn(t, h, 3*time.Minute, api.UpdateAbandon, migrationplan.MigrationDecision{Actor: "carol"}, "not waiting for a decision")
	st := h.run(t, migrateInput("Pod", "none", false))
	if st.Outcome != migrationplan.OutcomeMigrated || st.Actor != "bob" || !strings.Contains(st.Reason, "evicted on bob's word") {
		t.Fatalf("state %+v", st)
	}
	if got := h.called("PreserveEvidence", "RequestMigrationSlot", "AcquirePermit", "EvictPod", "WaitWorkloadReady"); got != "PreserveEvidence,RequestMigrationSlot,AcquirePermit,EvictPod" {
		t.Fatalf("calls %s", got)
	}
}

// A shrinkable Job's Pod is evicted; a budget's refusals are retried, not bypassed; the breaker's
// refusal is waited out.
func TestMigrateShrinkableEvictsThroughBudget(t *testing.T) {
	h := newMigration(t)
	h.evictBlocked, h.denyPermits = 3, 2
	h.grant(time.Second)
	st := h.run(t, migrateInput("Job", "none", true))
	if st.Outcome != migrationplan.OutcomeMigrated || st.Mechanism != migrationplan.MoveEvict || strings.Join(st.Moved, ",") != "train-0" {
		t.Fatalf("state %+v", st)
	}
	if got := h.called("AcquirePermit", "EvictPod", "SuspendJob"); got != "AcquirePermit,AcquirePermit,AcquirePermit,EvictPod" {
		t.Fatalf("calls %s", got)
	}
}

func TestMigrateReadyTimeout(t *testing.T) {
	h := newMigration(t)
	h.readyNever = true
	h.grant(time.Second)
	st := h.run(t, migrateInput("Deployment", "none", false))
	if st.Outcome != migrationplan.OutcomeFailed || st.Class != migrationplan.FailRetryable || !strings.Contains(st.Reason, "not Ready on other devices within 30m0s") {
		t.Fatalf("state %+v", st)
	}
	if h.records[0].Outcome != migrationplan.OutcomeFailed || h.records[0].Class != migrationplan.FailRetryable || h.alerts[0].Level != decide.LevelWarning {
		t.Fatalf("records %+v alerts %+v", h.records, h.alerts)
	}
}

func TestMigrateResumeFailureNeedsCleanup(t *testing.T) {
	h := newMigration(t)
	h.resumeFails = true
	h.grant(time.Second)
	st := h.run(t, migrateInput("Job", "none", false))
	if st.Outcome != migrationplan.OutcomeFailed || st.Class != migrationplan.FailNeedsCleanup || !strings.Contains(st.Reason, "job left suspended") {
		t.Fatalf("state %+v", st)
	}
	if h.alerts[0].Level != decide.LevelCritical {
		t.Fatalf("alert %+v", h.alerts[0])
	}
}

// A Lease someone else holds: the run stops without acting.
func TestMigrateLeaseHeldElsewhere(t *testing.T) {
	h := newMigration(t)
	h.holder = "migrate/other"
	st := h.run(t, migrateInput("Job", "annotation", false))
	if st.Outcome != migrationplan.OutcomeFailed || st.Class != migrationplan.FailNonRetryable || !strings.Contains(st.Reason, "held by migrate/other") {
		t.Fatalf("state %+v", st)
	}
	if got := strings.Join(h.calls, ","); got != "TakeMigrationLease" {
		t.Fatalf("calls %s", got)
	}
}

// Losing the Lease mid-checkpoint stops the migration before it moves anything.
func TestMigrateLeaseLostMidway(t *testing.T) {
	h := newMigration(t)
	h.checkpointNever, h.loseLeaseAfter = true, 4
	h.grant(time.Second)
	st := h.run(t, migrateInput("Job", "annotation", false))
	if st.Outcome != migrationplan.OutcomeFailed || st.Class != migrationplan.FailNonRetryable || !strings.Contains(st.Reason, "migration lease lost") {
		t.Fatalf("state %+v", st)
	}
	if got := h.called("SuspendJob", "EvictPod", "PreserveEvidence"); got != "" {
		t.Fatalf("acted after losing the lease: %s", got)
	}
	if h.slotReleased != 1 {
		t.Fatalf("slot released %d times", h.slotReleased)
	}
}

// A slot request nobody answers (a limiter that was reset) is sent again every 10 minutes.
func TestMigrateAsksForItsSlotAgain(t *testing.T) {
	h := newMigration(t)
	h.grant(25 * time.Minute)
	st := h.run(t, migrateInput("Deployment", "none", false))
	if st.Outcome != migrationplan.OutcomeMigrated {
		t.Fatalf("state %+v", st)
	}
	if got := h.called("RequestMigrationSlot"); got != "RequestMigrationSlot,RequestMigrationSlot,RequestMigrationSlot" {
		t.Fatalf("slot requests %s, want one at 0, 10 and 20 minutes", got)
	}
}

// The decision window is the policy's; a policy from before the field (zero) waits 24 hours.
func TestMigrateDecisionTimeoutFromPolicy(t *testing.T) {
	for _, c := range []struct {
		set  time.Duration
		want string
	}{{time.Hour, "nobody decided within 1h0m0s"}, {0, "nobody decided within 24h0m0s"}} {
		h := newMigration(t)
		in := migrateInput("Pod", "none", false)
		in.Policy.DecisionTimeout = policy.JSONDuration(c.set)
		st := h.run(t, in)
		if st.Outcome != migrationplan.OutcomeEvidencePreserved || !strings.Contains(st.Reason, c.want) {
			t.Fatalf("decision timeout %s: %+v", c.set, st)
		}
		if h.records[0].OnDevice != 0 {
			t.Fatalf("a workload left on the device counted %s off it", h.records[0].OnDevice)
		}
	}
}

// Evidence that cannot be written ends the migration failed (retryable), never silently.
func TestMigrateEvidenceNotKept(t *testing.T) {
	h := newMigration(t)
	h.evidenceFails = true
	st := h.run(t, migrateInput("Pod", "none", false))
	if st.Outcome != migrationplan.OutcomeFailed || st.Class != migrationplan.FailRetryable || !strings.Contains(st.Reason, "evidence not kept") {
		t.Fatalf("state %+v", st)
	}
}

// A migrated workload counts the time from the quarantine to its end as time on the failed device.
func TestMigrateCountsTimeOnTheDevice(t *testing.T) {
	h := newMigration(t)
	h.grant(time.Minute)
	in := migrateInput("Deployment", "none", false)
	h.env.SetStartTime(in.QuarantinedAt.Add(time.Minute))
	h.run(t, in)
	if r := h.records[0]; r.Outcome != migrationplan.OutcomeMigrated || r.OnDevice < 2*time.Minute || r.OnDevice > 3*time.Minute {
		t.Fatalf("record %+v: want about 2 minutes on the device (1 before the migration, 1 for the slot)", r)
	}
}

// A JobSet is suspended and resumed as a whole, through its own API.
func TestMigrateJobSetSuspendedAsAWhole(t *testing.T) {
	h := newMigration(t)
	h.grant(time.Second)
	in := migrateInput("JobSet", "none", false)
	in.Workload.APIVersion = "jobset.x-k8s.io/v1alpha2"
	st := h.run(t, in)
	if st.Outcome != migrationplan.OutcomeMigrated || st.Mechanism != migrationplan.MoveSuspend {
		t.Fatalf("state %+v", st)
	}
	if got := strings.Join(h.suspendKinds, ","); got != "JobSet jobset.x-k8s.io/v1alpha2,JobSet jobset.x-k8s.io/v1alpha2" || len(h.suspends) != 2 || !h.suspends[0] || h.suspends[1] {
		t.Fatalf("suspends %v of %s", h.suspends, got)
	}
}
