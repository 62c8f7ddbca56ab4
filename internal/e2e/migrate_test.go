//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// migrateClass devices move their workloads when quarantined (one migration per node at a time);
// migrateSlowClass gives workloads 2 s to checkpoint.
const (
	migrateClass     = "migrate.gpu.sim.devicewarden.io"
	migrateSlowClass = "migrate-slow.gpu.sim.devicewarden.io"
)

// jobPods lists a Job's Pods that run and are not being deleted, by name.
func jobPods(ctx context.Context, kube kubernetes.Interface, ns, job string) ([]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// podDevice reads the device a running Pod's claim was allocated.
func podDevice(ctx context.Context, kube kubernetes.Interface, pod corev1.Pod) (device.ID, error) {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		c, err := claimAllocated(ctx, kube, pod.Namespace, *s.ResourceClaimName)
		if err != nil {
			return device.ID{}, err
		}
		r := c.Status.Allocation.Devices.Results[0]
		return device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}, nil
	}
	return device.ID{}, fmt.Errorf("pod %s has no claim yet", pod.Name)
}

// runningJob starts a Job on one node and waits until n of its Pods run, with their devices.
func runningJob(t *testing.T, ctx context.Context, w sim.Workload, o sim.JobOptions) ([]corev1.Pod, []device.ID) {
	t.Helper()
	return runningJobOn(t, ctx, shared.kube, w, o)
}

// runningJobOn is runningJob on the cluster of kube.
func runningJobOn(t *testing.T, ctx context.Context, kube kubernetes.Interface, w sim.Workload, o sim.JobOptions) ([]corev1.Pod, []device.ID) {
	t.Helper()
	if err := sim.EnsureNamespace(ctx, kube, w.Namespace); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateJob(ctx, kube, o); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	var ids []device.ID
	eventually(t, 60*time.Second, "job "+w.Name+" running", func() error {
		var err error
		if pods, err = jobPods(ctx, kube, w.Namespace, w.Name); err != nil || len(pods) != max(1, o.Pods) {
			return fmt.Errorf("%d pods running (%v)", len(pods), err)
		}
		ids = ids[:0]
		for _, p := range pods {
			id, err := podDevice(ctx, kube, p)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	return pods, ids
}

// migrationOf waits for the device's workflow to have started a migration and returns its ID.
func migrationOf(t *testing.T, ctx context.Context, id device.ID) string {
	t.Helper()
	st := waitState(t, ctx, shared, id, 30*time.Second, func(st decide.DeviceState) bool { return len(st.Migrations) > 0 })
	return st.Migrations[len(st.Migrations)-1]
}

func migrationState(ctx context.Context, id string) (migrationplan.MigrationState, error) {
	var st migrationplan.MigrationState
	return st, queryInto(ctx, shared.temporal, id, &st)
}

// migrationResult waits for a migration to end and returns its record.
func migrationResult(t *testing.T, ctx context.Context, id string) migrationplan.MigrationState {
	t.Helper()
	var st migrationplan.MigrationState
	if err := shared.temporal.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil {
		t.Fatalf("migration %s: %v", id, err)
	}
	return st
}

// A Job that checkpoints is asked to, answers (the simulator plays its code), is suspended and
// resumed, and runs again on another device; the old device keeps no Pod of it.
func TestCheckpointedJobMovesToAnotherDevice(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, migrateClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "mig-ckpt", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	w := sim.Workload{Namespace: "mig-ckpt", Name: "train", Node: nodes[0], DeviceClass: migrateClass}
	pods, ids := runningJob(t, ctx, w, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: time.Second})
	bad := ids[0]
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	mid := migrationOf(t, ctx, bad)
	if want := api.MigrationID(bad, "", ""); !strings.HasPrefix(mid, strings.TrimSuffix(want, "//")) {
		t.Fatalf("migration ID %s, want it under %s", mid, want)
	}
	st := migrationResult(t, ctx, mid)
	if st.Outcome != migrationplan.OutcomeMigrated || st.Mechanism != migrationplan.MoveSuspend || st.CheckpointWait.D() < time.Second || len(st.Ready) != 1 {
		t.Fatalf("migration %+v", st)
	}
	now, err := jobPods(ctx, kube, w.Namespace, w.Name)
	if err != nil || len(now) != 1 || now[0].UID == pods[0].UID {
		t.Fatalf("pods after the move: %v (%v)", now, err)
	}
	if now[0].Annotations[kubeobj.AnnotationCheckpoint] != kubeobj.CheckpointAnnotation {
		t.Fatalf("the new Pod lost its template's declarations: %v", now[0].Annotations)
	}
	moved, err := podDevice(ctx, kube, now[0])
	if err != nil || moved == bad {
		t.Fatalf("the Job runs on %s (%v), the quarantined device is %s", moved, err, bad)
	}
	// The Lease is gone once the migration ended.
	leases, err := kube.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{
		LabelSelector: kubeobj.LabelWorkloadNamespace + "=" + w.Namespace + "," + kubeobj.LabelWorkloadName + "=train"})
	if err != nil || len(leases.Items) != 0 {
		t.Fatalf("leases left: %v (%v)", leases, err)
	}
	recordHistory(t, ctx, shared.temporal, mid, "migrate_job_checkpoint.json")
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_migrate_trigger.json")
}

// One Pod of a shrinkable indexed Job moves alone, and only once its PodDisruptionBudget allows it.
func TestShrinkableShardWaitsForItsBudget(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, migrateClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "mig-shard", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	w := sim.Workload{Namespace: "mig-shard", Name: "shards", Node: nodes[0], DeviceClass: migrateClass}
	pods, ids := runningJob(t, ctx, w, sim.JobOptions{Pods: 2, Shrinkable: true})
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "shards"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shards"}}}}
	if _, err := kube.PolicyV1().PodDisruptionBudgets(w.Namespace).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the budget counts both Pods", func() error {
		b, err := kube.PolicyV1().PodDisruptionBudgets(w.Namespace).Get(ctx, "shards", metav1.GetOptions{})
		if err != nil || b.Status.ObservedGeneration < b.Generation || b.Status.CurrentHealthy != 2 {
			return fmt.Errorf("budget %+v (%v)", b.Status, err)
		}
		return nil
	})
	bad := ids[1]
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
		t.Fatal(err)
	}
	mid := migrationOf(t, ctx, bad)
	eventually(t, 30*time.Second, "the eviction refused by the budget", func() error {
		st, err := migrationState(ctx, mid)
		if err != nil || st.Phase != migrationplan.PhaseMoving || !strings.Contains(st.Waiting, "eviction of "+pods[1].Name) {
			return fmt.Errorf("migration %s %q (%v)", st.Phase, st.Waiting, err)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // a few refused attempts
	if p, err := kube.CoreV1().Pods(w.Namespace).Get(ctx, pods[1].Name, metav1.GetOptions{}); err != nil || p.UID != pods[1].UID || p.DeletionTimestamp != nil {
		t.Fatalf("the budget was bypassed: %v %v", p, err)
	}
	pdb, err = kube.PolicyV1().PodDisruptionBudgets(w.Namespace).Get(ctx, "shards", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(1))
	if _, err := kube.PolicyV1().PodDisruptionBudgets(w.Namespace).Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := migrationResult(t, ctx, mid)
	if st.Outcome != migrationplan.OutcomeMigrated || st.Mechanism != migrationplan.MoveEvict || strings.Join(st.Moved, ",") != pods[1].Name {
		t.Fatalf("migration %+v", st)
	}
	now, err := jobPods(ctx, kube, w.Namespace, w.Name)
	if err != nil || len(now) != 2 {
		t.Fatalf("pods after: %v (%v)", now, err)
	}
	kept := false
	for _, p := range now {
		if p.UID == pods[0].UID {
			kept = true
		}
		if d, err := podDevice(ctx, kube, p); err != nil || d == bad {
			t.Fatalf("pod %s on %s (%v)", p.Name, d, err)
		}
	}
	if !kept {
		t.Fatalf("the shard on the healthy device moved too: %v", now)
	}
	recordHistory(t, ctx, shared.temporal, mid, "migrate_shard_budget.json")
}

// A bare Pod that cannot save its work is not evicted: its evidence is kept and a person decides.
// abandon leaves one where it is; migrate-anyway evicts the other.
func TestUnrecoverablePodKeepsEvidenceAndWaitsForAPerson(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, migrateClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "mig-bare", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, decision := range []string{api.UpdateAbandon, api.UpdateMigrateAnyway} {
		w := sim.Workload{Namespace: "mig-bare", Name: fmt.Sprintf("notebook-%d", i), Node: nodes[i], Index: ptr.To(0), Template: true, DeviceClass: migrateClass}
		pod := runningPod(t, ctx, kube, w)
		bad := device.ID{Driver: sim.Driver, Pool: nodes[i], Device: "gpu-0"}
		if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
			t.Fatal(err)
		}
		mid := migrationOf(t, ctx, bad)
		var st migrationplan.MigrationState
		eventually(t, 30*time.Second, "waiting for a decision", func() error {
			var err error
			if st, err = migrationState(ctx, mid); err != nil || st.Phase != migrationplan.PhaseWaitingForDecision {
				return fmt.Errorf("migration %s (%v)", st.Phase, err)
			}
			return nil
		})
		cm, err := kube.CoreV1().ConfigMaps("default").Get(ctx, st.Evidence, metav1.GetOptions{})
		if err != nil || !strings.Contains(cm.Data["workload"], w.Name) || cm.Data["report"] == "" {
			t.Fatalf("evidence %s: %v (%v)", st.Evidence, cm, err)
		}
		if _, err := shared.cli(ctx, "migration", decision, mid); err == nil || !strings.Contains(err.Error(), "--actor is required") {
			t.Fatalf("an unsigned decision: %v", err)
		}
		out, err := shared.cli(ctx, "migration", decision, mid, "--actor", "alice", "--reason", "e2e")
		if err != nil {
			t.Fatalf("%s: %v (%s)", decision, err, out)
		}
		res := migrationResult(t, ctx, mid)
		p, err := kube.CoreV1().Pods(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		switch decision {
		case api.UpdateAbandon:
			if res.Outcome != migrationplan.OutcomeAbandoned || err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil {
				t.Fatalf("abandon: %+v; pod %v (%v)", res, p, err)
			}
			recordHistory(t, ctx, shared.temporal, mid, "migrate_bare_abandon.json")
		default:
			if res.Outcome != migrationplan.OutcomeMigrated || res.Actor != "alice" {
				t.Fatalf("migrate-anyway: %+v", res)
			}
			eventually(t, 30*time.Second, "the evicted Pod gone", func() error {
				if p, err := kube.CoreV1().Pods(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err == nil && p.UID == pod.UID {
					return fmt.Errorf("pod still there")
				}
				return nil
			})
			recordHistory(t, ctx, shared.temporal, mid, "migrate_bare_anyway.json")
		}
	}
}

// A Job that does not checkpoint in time (2 s here) is not moved until a person says so; then it
// is suspended and resumed like any Job.
func TestCheckpointTimeoutWaitsThenMovesOnDecision(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, migrateSlowClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "mig-slow", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	w := sim.Workload{Namespace: "mig-slow", Name: "train", Node: nodes[0], DeviceClass: migrateSlowClass}
	_, ids := runningJob(t, ctx, w, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: time.Hour})
	if _, err := sim.SetHealth(ctx, kube, ids[0], corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	mid := migrationOf(t, ctx, ids[0])
	eventually(t, 30*time.Second, "waiting for a decision", func() error {
		st, err := migrationState(ctx, mid)
		if err != nil || st.Phase != migrationplan.PhaseWaitingForDecision || !strings.Contains(strings.Join(stepTexts(st), "|"), "no checkpoint within 2s") {
			return fmt.Errorf("migration %s %v (%v)", st.Phase, stepTexts(st), err)
		}
		return nil
	})
	if out, err := shared.cli(ctx, "migration", api.UpdateMigrateAnyway, mid, "--actor", "bob"); err != nil {
		t.Fatalf("migrate-anyway: %v (%s)", err, out)
	}
	st := migrationResult(t, ctx, mid)
	if st.Outcome != migrationplan.OutcomeMigrated || st.Mechanism != migrationplan.MoveSuspend {
		t.Fatalf("migration %+v", st)
	}
	recordHistory(t, ctx, shared.temporal, mid, "migrate_checkpoint_timeout.json")
}

func stepTexts(st migrationplan.MigrationState) []string {
	var out []string
	for _, s := range st.Steps {
		out = append(out, s.What)
	}
	return out
}

// Three Jobs on one node whose devices fail together migrate one at a time (perNode 1): the
// migrations' own records of their slots never overlap, and the ones waiting say so.
func TestPerNodeLimitMovesOneAtATime(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, migrateClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "mig-limit", 1, 6)
	if err != nil {
		t.Fatal(err)
	}
	var bad []device.ID
	for i := 0; i < 3; i++ {
		w := sim.Workload{Namespace: "mig-limit", Name: fmt.Sprintf("train-%d", i), Node: nodes[0], DeviceClass: migrateClass}
		_, ids := runningJob(t, ctx, w, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: time.Second})
		bad = append(bad, ids[0])
	}
	setHealth(t, ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy)
	var mids []string
	for _, id := range bad {
		mids = append(mids, migrationOf(t, ctx, id))
	}
	sawWaiting := false
	eventually(t, 30*time.Second, "a migration waiting for its slot", func() error {
		for _, mid := range mids {
			if st, err := migrationState(ctx, mid); err == nil && st.Phase == migrationplan.PhaseWaitingForSlot && strings.Contains(st.Waiting, "at most 1 on node") {
				sawWaiting = true
				return nil
			}
		}
		return fmt.Errorf("none waits")
	})
	type span struct{ from, to time.Time }
	var spans []span
	for _, mid := range mids {
		st := migrationResult(t, ctx, mid)
		if st.Outcome != migrationplan.OutcomeMigrated || st.SlotAt.IsZero() || st.SlotFreedAt.IsZero() {
			t.Fatalf("migration %s: %+v", mid, st)
		}
		spans = append(spans, span{st.SlotAt, st.SlotFreedAt})
	}
	// The limiter's own record is the proof: never two holders on one node. The migrations' times
	// agree with it up to the release's own latency: a migration notes SlotFreedAt once its release
	// activity returns, and the limiter may grant the next one a few milliseconds before that.
	var slots migrationplan.SlotState
	if err := queryInto(ctx, shared.temporal, api.MigrationLimiterID, &slots); err != nil {
		t.Fatal(err)
	}
	if slots.MaxOnNode != 1 {
		t.Fatalf("the limiter held up to %d migrations at once on one node", slots.MaxOnNode)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from.Before(spans[j].from) })
	for i := 1; i < len(spans); i++ {
		if spans[i].from.Before(spans[i-1].to.Add(-time.Second)) {
			t.Fatalf("migrations overlapped on one node: %v", spans)
		}
	}
	if !sawWaiting {
		t.Fatal("no migration was seen waiting")
	}
	recordRuns(t, ctx, shared.temporal, api.MigrationLimiterID, "migration_limiter")
}
