//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/poll"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// TestMigrationPartsOnTheRealAPIServer runs the migration's activities against the real apiserver
// and controller-manager (no workflow drives them yet): a Job's Pod is traced to its Job, its
// migration Lease is taken once, the checkpoint handshake round-trips on the Pod, a
// PodDisruptionBudget refuses the eviction (and allows it once relaxed), a Job is suspended (the Job
// controller removes its Pod) and resumed, and evidence is kept after the Pod is gone.
func TestMigrationPartsOnTheRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "migrate-parts"
	if err := sim.EnsureNamespace(ctx, kube, ns); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "migrate-parts", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	a := &migration.Activities{Kube: kube, OwnNamespace: ns}
	labels := map[string]string{"app": "train"}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train"}, Spec: batchv1.JobSpec{
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{kubeobj.AnnotationCheckpoint: "annotation"}},
			// On a kwok node, which runs it (a budget only protects running, Ready Pods).
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "train", Image: "trainer"}},
				NodeName: nodes[0]},
		}}}
	if _, err := kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	poll.Until(t, 30*time.Second, "the Job's Pod running", func() error {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=train"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%v pods (%v)", len(pods.Items), err)
		}
		pod = pods.Items[0]
		return nil
	})

	ws, err := a.FindWorkloads(ctx, migration.FindWorkloadsInput{Pods: []migration.PodRef{{Namespace: ns, Name: pod.Name}}})
	if err != nil || len(ws) != 1 || ws[0].Kind != "Job" || ws[0].Name != "train" || ws[0].Checkpoint != "annotation" {
		t.Fatalf("workloads %+v %v", ws, err)
	}
	w := ws[0]

	id := device.ID{Driver: sim.Driver, Pool: "migrate-parts", Device: "gpu-0"}
	mine := migration.LeaseInput{Workload: w, Holder: "migrate/" + id.String() + "/" + w.UID + "/1", Duration: time.Minute}
	theirs := mine
	theirs.Holder = "someone-else"
	if res, err := a.TakeMigrationLease(ctx, mine); err != nil || !res.Held {
		t.Fatalf("take: %+v %v", res, err)
	}
	if res, err := a.TakeMigrationLease(ctx, theirs); err != nil || res.Held || res.Holder != mine.Holder {
		t.Fatalf("a second holder: %+v %v", res, err)
	}

	cp := migration.CheckpointInput{Namespace: ns, Pods: w.Pods, ID: mine.Holder}
	if err := a.RequestCheckpoint(ctx, cp); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, kubeobj.AnnotationCheckpointCompleted, mine.Holder)
	if _, err := kube.CoreV1().Pods(ns).Patch(ctx, pod.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := a.CheckpointDone(ctx, cp); err != nil || !st.Done {
		t.Fatalf("checkpoint: %+v %v", st, err)
	}

	// A budget that allows no disruption refuses the eviction (429), retryably; relaxed, it allows it.
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evict := migration.EvictInput{Namespace: ns, Pod: pod.Name, UID: string(pod.UID)}
	poll.Until(t, 30*time.Second, "the budget observed", func() error {
		b, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil || b.Status.ObservedGeneration < b.Generation || b.Status.CurrentHealthy != 1 {
			return fmt.Errorf("budget status %+v (%v)", b.Status, err)
		}
		return nil
	})
	poll.Until(t, 30*time.Second, "the budget refuses the eviction", func() error {
		err := a.EvictPod(ctx, evict)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != migration.ErrEvictionBlocked || app.NonRetryable() {
			return fmt.Errorf("eviction answered %v", err)
		}
		return nil
	})
	if _, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the refused eviction removed the Pod: %v", err)
	}

	// Evidence first, as the workflow takes it; then suspend: the Job controller removes the Pod,
	// and the evidence is kept after it is gone.
	evidence, err := a.PreserveEvidence(ctx, migration.EvidenceInput{WorkflowID: mine.Holder, Device: id, Workload: w, Report: "gpu-0 Unhealthy: XID 79", Keep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SuspendJob(ctx, migration.SuspendInput{Namespace: ns, Job: "train", Suspend: true}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the suspended Job's Pod is gone", func() error {
		if _, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (%v)", err)
		}
		return nil
	})
	if err := a.EvictPod(ctx, evict); err != nil {
		t.Fatalf("evicting a Pod already gone: %v", err)
	}
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, evidence, metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data["pod-"+pod.Name+".json"], string(pod.UID)) || cm.Data["report"] != "gpu-0 Unhealthy: XID 79" {
		t.Fatalf("evidence %v %v", cm.Data, err)
	}
	if err := a.SuspendJob(ctx, migration.SuspendInput{Namespace: ns, Job: "train", Suspend: false}); err != nil {
		t.Fatal(err)
	}
	var next corev1.Pod
	poll.Until(t, 30*time.Second, "the resumed Job's new Pod running", func() error {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=train"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].UID == pod.UID || pods.Items[0].Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pods %d (%v)", len(pods.Items), err)
		}
		next = pods.Items[0]
		return nil
	})

	// The budget, relaxed, allows the eviction it refused.
	poll.Until(t, 30*time.Second, "budget relaxed", func() error {
		b, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if b.Spec.MinAvailable.IntValue() != 0 {
			b.Spec.MinAvailable = ptr.To(intstr.FromInt32(0))
			if _, err := kube.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, b, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		return a.EvictPod(ctx, migration.EvictInput{Namespace: ns, Pod: next.Name, UID: string(next.UID)})
	})
	if p, err := kube.CoreV1().Pods(ns).Get(ctx, next.Name, metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Fatalf("the allowed eviction left the Pod %s", p.Status.Phase)
	}
	if err := a.ReleaseMigrationLease(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if res, err := a.TakeMigrationLease(ctx, theirs); err != nil || !res.Held {
		t.Fatalf("after release another holder could not take it: %+v %v", res, err)
	}
}
