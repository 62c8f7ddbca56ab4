package migration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/worker"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// readyPod is a running, Ready Pod of a Job whose claim holds the given device.
func readyPod(name, job, dev string, ready bool) (*corev1.Pod, *resourcev1.ResourceClaim) {
	p := pod(name, ownedBy("batch/v1", "Job", job), nil)
	p.Status.Phase = corev1.PodRunning
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(name + "-gpu")}}
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name + "-gpu"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Driver: "gpu.example.com", Pool: "node-1", Device: dev, Request: "gpu"}}}}}}
	return p, c
}

func TestWorkloadPodsAndReadyElsewhere(t *testing.T) {
	bad := device.ID{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"}
	old, oldClaim := readyPod("train-old", "train", "gpu-0", true)
	onBad, badClaim := readyPod("train-again", "train", "gpu-0", true) // rescheduled onto the failed device
	notReady, nrClaim := readyPod("train-starting", "train", "gpu-2", false)
	other, otherClaim := readyPod("other-0", "other", "gpu-3", true)
	objs := []runtime.Object{old, oldClaim, onBad, badClaim, notReady, nrClaim, other, otherClaim,
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train"}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "other"}}}
	env, a, kube := activityEnv(t, objs...)
	a.MigratePoll = 10 * time.Millisecond
	w := api.Workload{Kind: "Job", Namespace: "team-a", Name: "train", UID: "uid-train", Pods: []string{"train-old"}}
	v, err := env.ExecuteActivity(a.WorkloadPods, w)
	if err != nil {
		t.Fatal(err)
	}
	var pods []PodInfo
	if err := v.Get(&pods); err != nil {
		t.Fatal(err)
	}
	if len(pods) != 3 || pods[0].Name != "train-again" || pods[1].Name != "train-old" || pods[2].Name != "train-starting" {
		t.Fatalf("pods %+v: want the Job's three, not the other Job's", pods)
	}
	in := ReadyInput{Workload: w, Device: bad, Before: []PodInfo{{Name: "train-old", UID: "uid-train-old"}}, Want: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ready, err := a.readyElsewhere(ctx, in, map[string]bool{"uid-train-old": true})
	if err != nil || len(ready) != 0 {
		t.Fatalf("ready %v (%v): the Pod on the failed device and the one not Ready do not count", ready, err)
	}
	np, nc := readyPod("train-new", "train", "gpu-1", true)
	if _, err := kube.ResourceV1().ResourceClaims("team-a").Create(context.Background(), nc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("team-a").Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err = env.ExecuteActivity(a.WaitWorkloadReady, in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := v.Get(&got); err != nil || strings.Join(got, ",") != "train-new" {
		t.Fatalf("ready elsewhere %v (%v)", got, err)
	}
}

func TestWaitPodsGoneAndCheckpoint(t *testing.T) {
	p := pod("train-0", nil, map[string]string{kubeobj.AnnotationCheckpointCompleted: "m-1"})
	env, a, kube := activityEnv(t, p)
	a.MigratePoll = 10 * time.Millisecond
	// A newer Pod of the same name does not keep the wait going.
	if _, err := env.ExecuteActivity(a.WaitPodsGone, WaitGoneInput{Namespace: "team-a", Pods: []PodInfo{{Name: "train-0", UID: "older"}, {Name: "gone", UID: "x"}}}); err != nil {
		t.Fatal(err)
	}
	v, err := env.ExecuteActivity(a.WaitCheckpoint, CheckpointInput{Namespace: "team-a", Pods: []string{"train-0"}, ID: "m-1"})
	if err != nil {
		t.Fatal(err)
	}
	var st CheckpointStatus
	if err := v.Get(&st); err != nil || !st.Done {
		t.Fatalf("checkpoint %+v (%v)", st, err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = kube.CoreV1().Pods("team-a").Delete(context.Background(), "train-0", metav1.DeleteOptions{})
	}()
	if _, err := env.ExecuteActivity(a.WaitPodsGone, WaitGoneInput{Namespace: "team-a", Pods: []PodInfo{{Name: "train-0", UID: "uid-train-0"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("team-a").Get(context.Background(), "train-0", metav1.GetOptions{}); err == nil {
		t.Fatal("WaitPodsGone returned while the Pod was there")
	}
}

type limiter struct {
	acquired []migrationplan.SlotRequest
	released []string
	err      error
}

func (l *limiter) Acquire(_ context.Context, r migrationplan.SlotRequest) error {
	l.acquired = append(l.acquired, r)
	return l.err
}

func (l *limiter) Release(_ context.Context, id string) error {
	l.released = append(l.released, id)
	return l.err
}

func TestMigrationSlotsAndRecord(t *testing.T) {
	env, a, _ := activityEnv(t)
	if _, err := env.ExecuteActivity(a.RequestMigrationSlot, migrationplan.SlotRequest{ID: "m"}); err == nil || !strings.Contains(err.Error(), "no migration limiter") {
		t.Fatalf("without a limiter: %v", err)
	}
	l := &limiter{}
	a.Limiter = l
	if _, err := env.ExecuteActivity(a.RequestMigrationSlot, migrationplan.SlotRequest{ID: "m", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.ReleaseMigrationSlot, "m"); err != nil {
		t.Fatal(err)
	}
	if len(l.acquired) != 1 || l.acquired[0].Node != "n" || len(l.released) != 1 || l.released[0] != "m" {
		t.Fatalf("limiter saw %+v %v", l.acquired, l.released)
	}
	l.err = errors.New("temporal down")
	if _, err := env.ExecuteActivity(a.ReleaseMigrationSlot, "m"); err == nil {
		t.Fatal("a failed release reported done")
	}
	rec := MigrationRecord{Outcome: migrationplan.OutcomeMigrated, Duration: 90 * time.Second, CheckpointWait: 3 * time.Second, OnDevice: 2 * time.Minute}
	if _, err := env.ExecuteActivity(a.RecordMigration, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.RecordMigration, MigrationRecord{Outcome: migrationplan.OutcomeFailed, Class: migrationplan.FailNeedsCleanup}); err != nil {
		t.Fatal(err)
	}
	m := a.Metrics
	if testutil.ToFloat64(m.Migrations.WithLabelValues("migrated", "")) != 1 || testutil.ToFloat64(m.Migrations.WithLabelValues("failed", "needs-cleanup")) != 1 ||
		testutil.ToFloat64(m.IdleDeviceSeconds) != 120 || samples(t, m.CheckpointSeconds) != 1 || samples(t, m.MigrationSeconds) != 2 ||
		sum(t, m.CheckpointSeconds) != 3 {
		t.Fatal("migration metrics not recorded")
	}
}

// sum is the total a histogram observed.
func sum(t *testing.T, h prometheus.Histogram) float64 {
	t.Helper()
	var d dto.Metric
	if err := h.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleSum()
}

// samples is how many observations a histogram holds.
func samples(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var d dto.Metric
	if err := h.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// The waits keep waiting while nothing changed: a Pod that has not answered; a Pod still there
// beside one that cannot be read.
func TestWaitsKeepWaiting(t *testing.T) {
	p := pod("train-0", nil, nil)
	q := pod("train-1", nil, nil)
	wait := func(fn any, in any) error {
		env, a, kube := activityEnv(t, p, q)
		a.MigratePoll = 10 * time.Millisecond
		kube.PrependReactor("get", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
			if act.(k8stesting.GetAction).GetName() == "train-1" {
				return true, nil, errors.New("apiserver unavailable")
			}
			return false, nil, nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		env.SetWorkerOptions(worker.Options{BackgroundActivityContext: ctx})
		switch fn.(string) {
		case "checkpoint":
			_, err := env.ExecuteActivity(a.WaitCheckpoint, in)
			return err
		default:
			_, err := env.ExecuteActivity(a.WaitPodsGone, in)
			return err
		}
	}
	if err := wait("checkpoint", CheckpointInput{Namespace: "team-a", Pods: []string{"train-0"}, ID: "m-1"}); err == nil {
		t.Fatal("WaitCheckpoint returned though the Pod never answered")
	}
	gone := WaitGoneInput{Namespace: "team-a", Pods: []PodInfo{{Name: "train-0", UID: "uid-train-0"}, {Name: "train-1", UID: "uid-train-1"}}}
	if err := wait("gone", gone); err == nil {
		t.Fatal("WaitPodsGone returned though one Pod is there and the other unread")
	}
}
