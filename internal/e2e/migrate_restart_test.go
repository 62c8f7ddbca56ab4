//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

const migrateRestartPolicy = `
policies:
  - name: migrate-restart
    match: {deviceClass: ` + migrateClass + `}
    migration: {enabled: true, checkpointTimeout: 3m, readyTimeout: 3m}
`

// checkpointingJob runs the Job "train" (checkpoint by annotation, answered after 8 s) on a fresh
// node in namespace ns and returns the device it holds.
func checkpointingJob(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns string) device.ID {
	t.Helper()
	if err := sim.EnsureClass(ctx, kube, migrateClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, ns, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.EnsureNamespace(ctx, kube, ns); err != nil {
		t.Fatal(err)
	}
	w := sim.Workload{Namespace: ns, Name: "train", Node: nodes[0], DeviceClass: migrateClass}
	if _, err := w.CreateJob(ctx, kube, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: 8 * time.Second}); err != nil {
		t.Fatal(err)
	}
	var bad device.ID
	eventually(t, time.Minute, "the Job running", func() error {
		pods, err := jobPods(ctx, kube, ns, "train")
		if err != nil || len(pods) != 1 {
			return fmt.Errorf("%d pods (%v)", len(pods), err)
		}
		bad, err = podDevice(ctx, kube, pods[0])
		return err
	})
	return bad
}

// migrationCheckpointing waits until the device's migration waits for its checkpoint and returns
// the migration's workflow ID.
func migrationCheckpointing(t *testing.T, ctx context.Context, s *stack, bad device.ID) string {
	t.Helper()
	return migrationIn(t, ctx, s, bad, migrationplan.PhaseCheckpointing)
}

// migrationIn waits until the device's first migration is in phase and returns its workflow ID.
func migrationIn(t *testing.T, ctx context.Context, s *stack, bad device.ID, phase migrationplan.MigrationPhase) string {
	t.Helper()
	var mid string
	eventually(t, time.Minute, "the migration in phase "+string(phase), func() error {
		st, err := stateOf(ctx, s, bad)
		if err != nil || len(st.Migrations) == 0 {
			return fmt.Errorf("device %s migrations %v (%v)", st.State, st.Migrations, err)
		}
		mid = st.Migrations[0]
		var m migrationplan.MigrationState
		if err := queryInto(ctx, s.temporal, mid, &m); err != nil || m.Phase != phase {
			return fmt.Errorf("migration %s (%v)", m.Phase, err)
		}
		return nil
	})
	return mid
}

// movedOnce waits for the migration's end and checks it migrated the Job by suspension, which the
// Job controller's events show suspended and resumed exactly once.
func movedOnce(t *testing.T, ctx context.Context, s *stack, ns, mid string) migrationplan.MigrationState {
	t.Helper()
	var m migrationplan.MigrationState
	if err := s.temporal.GetWorkflow(ctx, mid, "").Get(ctx, &m); err != nil {
		t.Fatal(err)
	}
	if m.Outcome != migrationplan.OutcomeMigrated || m.Mechanism != migrationplan.MoveSuspend {
		t.Fatalf("migration %+v", m)
	}
	events, err := s.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "train").String()})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int32{}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "Job" {
			count[e.Reason] += max(1, e.Count)
		}
	}
	if count["Suspended"] != 1 || count["Resumed"] != 1 {
		t.Fatalf("the Job's events %v: want one Suspended and one Resumed", count)
	}
	return m
}

// TestKilledWorkerMidMigrationMovesOnce SIGKILLs the controller process while a migration waits
// for its Job's checkpoint, starts another, and checks the Job was suspended and resumed exactly
// once (the Job controller's events say so) and the migration ended migrated, its Lease taken back
// by the same migration rather than by a new holder.
func TestKilledWorkerMidMigrationMovesOnce(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, dir := ownInfra(t, ctx)
	kube := s.kube
	// The workload's own code answers checkpoint requests from this process, apart from the controllers.
	go func() { _ = (&sim.Checkpointer{Kube: kube, Poll: 100 * time.Millisecond, Logger: testLogger}).Run(ctx) }()
	bad := checkpointingJob(t, ctx, kube, "mig-kill")
	first := startChildWith(t, s, dir, "controller-1", migrateRestartPolicy)
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	mid := migrationCheckpointing(t, ctx, s, bad)
	first.kill(t)
	startChildWith(t, s, dir, "controller-2", migrateRestartPolicy)
	m := movedOnce(t, ctx, s, "mig-kill", mid)
	// The history shows one take of the Lease and no second holder: the migration resumed its own.
	for _, st := range m.Steps {
		t.Log(st.At.Format(time.RFC3339), st.What)
	}
}
