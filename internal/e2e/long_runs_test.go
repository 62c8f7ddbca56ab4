//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// longRunsSuggest is the history length at which this test's server suggests continue-as-new:
// short enough that a rollout and a migration continue as new at their first wait.
const longRunsSuggest = 20

// TestLongWaitsContinueAsNew takes the two workflows whose waits can last for weeks through
// continue-as-new on the real server: a rollout rolled back while a running Pod holds its node,
// and a migration held back by an open circuit breaker. Each continues as new while it waits, and
// each new run carries on where the last stopped: the node goes back to the plugin once released,
// and the migration, re-armed by an operator during its first wait, moves its Job from the next
// run with the slot it carried. With
// DEVICEWARDEN_RECORD_HISTORY set it records every run for the replay tests.
func TestLongWaitsContinueAsNew(t *testing.T) {
	onOwnStack(t) // mostly waits
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pols, err := policy.Parse([]byte(migrateRestartPolicy))
	if err != nil {
		t.Fatal(err)
	}
	pols = pols.WithIdentity(sim.Driver, sim.Identity...)
	s, stopInfra, err := startInfraWith(ctx, t.TempDir(), infraOptions{address: "127.0.0.1:0", suggestContinueAsNew: longRunsSuggest})
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	// One automatic action per window: the quarantine takes it, and the migration waits.
	_, stopCtl := s.controller(app.ControllerOptions{Workers: 4, Policies: pols,
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 1, MaxPercent: 100}})
	defer stopCtl()
	// The group returns once both waits, run side by side, are done.
	t.Run("waits", func(t *testing.T) {
		t.Run("rollout held by a running pod", func(t *testing.T) {
			t.Parallel()
			rolloutHeldAcrossRuns(t, ctx, s)
		})
		t.Run("migration held by the breaker", func(t *testing.T) {
			t.Parallel()
			migrationHeldAcrossRuns(t, ctx, s)
		})
	})
}

// continuedAsNew waits until a workflow's current run is not the one given.
func continuedAsNew(t *testing.T, ctx context.Context, s *stack, id, run string) string {
	t.Helper()
	var now string
	eventually(t, 2*time.Minute, id+" continued as new", func() error {
		d, err := s.temporal.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return err
		}
		if now = d.GetWorkflowExecutionInfo().GetExecution().GetRunId(); now == run {
			return fmt.Errorf("still run %s", run)
		}
		return nil
	})
	return now
}

func currentRun(t *testing.T, ctx context.Context, s *stack, id string) string {
	t.Helper()
	d, err := s.temporal.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

func rolloutHeldAcrossRuns(t *testing.T, ctx context.Context, s *stack) {
	kube, tc := s.kube, s.temporal
	nodes, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: "rolong", Count: 1, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	wantOwner(t, ctx, kube, node, sim.OwnerPlugin, 2)
	if out, err := s.kubeCLI(ctx, "sim", "misbehave", node, "--drift", "1"); err != nil {
		t.Fatalf("misbehave: %v\n%s", err, out)
	}
	const class = "rolong.gpu.sim.devicewarden.io"
	_, plan := writePlan(t, "long", "", rolloutPhase{name: "pool", pool: "rolong", class: class, namespace: "rolong",
		soak: "8s", gates: "{maxDrift: 0}"})
	if _, err := api.StartRollout(ctx, tc, plan); err != nil {
		t.Fatal(err)
	}
	id := api.RolloutID(plan.Name)
	waitRollout(t, ctx, tc, plan.Name, 30*time.Second, "soaking", soaking(0))
	runningPod(t, ctx, kube, sim.Workload{Namespace: "rolong", Name: "long-job", Node: node, DeviceClass: class})
	waitRollout(t, ctx, tc, plan.Name, time.Minute, "rolled back, the node held", func(st api.RolloutStatus) bool {
		return st.State == rolloutplan.StateRolledBack && len(st.Draining) == 1
	})
	held := currentRun(t, ctx, s, id)
	continuedAsNew(t, ctx, s, id, held)
	st := waitRollout(t, ctx, tc, plan.Name, 10*time.Second, "still rolled back after continue-as-new", func(st api.RolloutStatus) bool {
		return st.State == rolloutplan.StateRolledBack && len(st.Draining) == 1 && !st.HoldUntil.IsZero()
	})
	wantOwner(t, ctx, kube, node, sim.OwnerDRA, 1)
	// The job ends: the continued run routes the node back to the plugin.
	if err := kube.CoreV1().Pods("rolong").Delete(ctx, "long-job", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := kube.ResourceV1().ResourceClaims("rolong").Delete(ctx, "long-job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantOwner(t, ctx, kube, node, sim.OwnerPlugin, 2)
	after := waitRollout(t, ctx, tc, plan.Name, 10*time.Second, "drained", func(st api.RolloutStatus) bool { return len(st.Draining) == 0 })
	if !after.HoldUntil.Equal(st.HoldUntil) || after.State != rolloutplan.StateRolledBack {
		t.Fatalf("after the drain: state %s, hold until %s; before %s", after.State, after.HoldUntil, st.HoldUntil)
	}
	if n := len(runIDs(t, ctx, tc, id)); n < 2 {
		t.Fatalf("%d runs", n)
	}
	recordRuns(t, ctx, tc, id, "rollout_continued")
	if err := tc.TerminateWorkflow(ctx, id, "", "test done"); err != nil {
		t.Fatal(err)
	}
}

func migrationHeldAcrossRuns(t *testing.T, ctx context.Context, s *stack) {
	bad := checkpointingJob(t, ctx, s.kube, "miglong")
	if _, err := sim.SetHealth(ctx, s.kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	mid := migrationIn(t, ctx, s, bad, migrationplan.PhaseWaitingForBreaker)
	// Resumed now, the breaker grants the next request: the run's history is full by the end of
	// its first 30 s wait, so that request comes from the next run, which carries the slot.
	first := currentRun(t, ctx, s, mid)
	if out, err := s.cli(ctx, "breaker", "resume", "--actor", "sre", "--reason", "storm over"); err != nil {
		t.Fatalf("breaker resume: %v\n%s", err, out)
	}
	m := movedOnce(t, ctx, s, "miglong", mid)
	if runs := runIDs(t, ctx, s.temporal, mid); len(runs) < 2 || runs[0] != first || m.SlotAt.IsZero() {
		t.Fatalf("runs %v (first %s), slot at %s: want the wait continued as new, the slot carried", runs, first, m.SlotAt)
	}
	leases, err := s.kube.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{
		LabelSelector: kubeobj.LabelWorkloadNamespace + "=miglong," + kubeobj.LabelWorkloadName + "=train"})
	if err != nil || len(leases.Items) != 0 {
		t.Fatalf("leases left: %v (%v)", leases, err)
	}
	recordRuns(t, ctx, s.temporal, mid, "migrate_continued")
}
