//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

const jobSetCRD = `{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "jobsets.jobset.x-k8s.io"},
  "spec": {"group": "jobset.x-k8s.io", "scope": "Namespaced",
    "names": {"plural": "jobsets", "singular": "jobset", "kind": "JobSet", "listKind": "JobSetList"},
    "versions": [{"name": "v1alpha2", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}`

// rest runs one raw request against the apiserver and decodes the answer into out (when set).
func rest(ctx context.Context, kube kubernetes.Interface, verb, path string, body []byte, out any) error {
	req := kube.BatchV1().RESTClient().Verb(verb).AbsPath(path)
	if verb == "PATCH" {
		req = kube.BatchV1().RESTClient().Patch(types.MergePatchType).AbsPath(path)
	}
	if body != nil {
		req = req.Body(body)
	}
	raw, err := req.Do(ctx).Raw()
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// A JobSet (its CRD installed; this test plays its controller, which passes spec.suspend on to its
// Job, as the real one does) is suspended and resumed as a whole: its Pod comes back on another device.
func TestJobSetIsSuspendedAsAWhole(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := rest(ctx, kube, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", []byte(jobSetCRD), nil); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("install the JobSet CRD: %v", err)
	}
	const ns, base = "mig-jobset", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/mig-jobset/jobsets"
	if err := sim.EnsureNamespace(ctx, kube, ns); err != nil {
		t.Fatal(err)
	}
	var js struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Suspend bool `json:"suspend"`
		} `json:"spec"`
	}
	eventually(t, 30*time.Second, "the JobSet API served", func() error {
		return rest(ctx, kube, "POST", base, []byte(`{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"train"},"spec":{"suspend":false}}`), &js)
	})
	if err := sim.EnsureClass(ctx, kube, migrateClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "mig-jobset", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	w := sim.Workload{Namespace: ns, Name: "train-workers-0", Node: nodes[0], DeviceClass: migrateClass}
	job, err := w.CreateJob(ctx, kube, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "train", UID: js.Metadata.UID, Controller: ptr.To(true)}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{owner}}})
	if _, err := kube.BatchV1().Jobs(ns).Patch(ctx, job.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The JobSet controller's part: its spec.suspend goes to its Job.
	var suspends atomic.Int32
	go func() {
		last := false
		for ctx.Err() == nil {
			if err := rest(ctx, kube, "GET", base+"/train", nil, &js); err == nil && js.Spec.Suspend != last {
				last = js.Spec.Suspend
				if last {
					suspends.Add(1)
				}
				p := []byte(fmt.Sprintf(`{"spec":{"suspend":%t}}`, last))
				_, _ = kube.BatchV1().Jobs(ns).Patch(ctx, job.Name, types.MergePatchType, p, metav1.PatchOptions{})
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	var first corev1.Pod
	eventually(t, time.Minute, "the JobSet's Pod running", func() error {
		pods, err := jobPods(ctx, kube, ns, job.Name)
		if err != nil || len(pods) != 1 {
			return fmt.Errorf("%d pods (%v)", len(pods), err)
		}
		first = pods[0]
		return nil
	})
	bad, err := podDevice(ctx, kube, first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	mid := migrationOf(t, ctx, bad)
	st := migrationResult(t, ctx, mid)
	if st.Outcome != migrationplan.OutcomeMigrated || st.Mechanism != migrationplan.MoveSuspend || suspends.Load() != 1 {
		t.Fatalf("migration %+v; JobSet suspended %d times", st, suspends.Load())
	}
	if err := rest(ctx, kube, "GET", base+"/train", nil, &js); err != nil || js.Spec.Suspend {
		t.Fatalf("the JobSet was left suspended (%v)", err)
	}
	now, err := jobPods(ctx, kube, ns, job.Name)
	if err != nil || len(now) != 1 || now[0].UID == first.UID {
		t.Fatalf("pods after the move: %v (%v)", now, err)
	}
	if d, err := podDevice(ctx, kube, now[0]); err != nil || d == bad {
		t.Fatalf("the JobSet's Pod runs on %s (%v)", d, err)
	}
	// The Lease is gone once the migration ended, and stays gone (the holding activity, cancelled as
	// the migration ends, must not write it again).
	time.Sleep(time.Second)
	leases, err := kube.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{
		LabelSelector: kubeobj.LabelWorkloadNamespace + "=" + ns + "," + kubeobj.LabelWorkloadName + "=train"})
	if err != nil || len(leases.Items) != 0 {
		t.Fatalf("leases left: %d (%v)", len(leases.Items), err)
	}
	recordHistory(t, ctx, shared.temporal, mid, "migrate_jobset.json")
}
