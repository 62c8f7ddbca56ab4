package migration

import (
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

func ownedBy(apiVersion, kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: ptr.To(true)}}
}

func pod(name string, owners []metav1.OwnerReference, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-" + name), OwnerReferences: owners, Annotations: ann}}
}

func TestFindWorkloads(t *testing.T) {
	objs := []runtime.Object{
		pod("bare", nil, map[string]string{kubeobj.AnnotationCheckpoint: "annotation"}),
		pod("train-0", ownedBy("batch/v1", "Job", "train"), map[string]string{kubeobj.AnnotationCheckpoint: "annotation", kubeobj.AnnotationShrinkable: "true"}),
		pod("train-1", ownedBy("batch/v1", "Job", "train"), map[string]string{kubeobj.AnnotationCheckpoint: "annotation", kubeobj.AnnotationShrinkable: "true"}),
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train"}},
		pod("shard-0", ownedBy("batch/v1", "Job", "shards-workers-0"), nil),
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "shards-workers-0", OwnerReferences: ownedBy("jobset.x-k8s.io/v1alpha2", "JobSet", "shards")}},
		pod("web-abc", ownedBy("apps/v1", "ReplicaSet", "web-7d9"), nil),
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web-7d9", OwnerReferences: ownedBy("apps/v1", "Deployment", "web")}},
		pod("db-0", ownedBy("apps/v1", "StatefulSet", "db"), map[string]string{kubeobj.AnnotationCheckpoint: "criu", kubeobj.AnnotationShrinkable: "yes"}),
	}
	env, a, _ := activityEnv(t, objs...)
	refs := []PodRef{{"team-a", "bare"}, {"team-a", "train-1"}, {"team-a", "train-0"}, {"team-a", "shard-0"}, {"team-a", "web-abc"}, {"team-a", "db-0"}, {"team-a", "gone"}}
	v, err := env.ExecuteActivity(a.FindWorkloads, FindWorkloadsInput{Pods: refs})
	if err != nil {
		t.Fatal(err)
	}
	var got []api.Workload
	if err := v.Get(&got); err != nil {
		t.Fatal(err)
	}
	summary := func(w api.Workload) string {
		return fmt.Sprintf("%s/%s %s pods=%v checkpoint=%s shrinkable=%v problems=%d", w.Kind, w.Name, w.UID, w.Pods, w.Checkpoint, w.Shrinkable, len(w.Problems))
	}
	want := []string{
		"Pod/bare uid-bare pods=[bare] checkpoint=annotation shrinkable=false problems=0",
		"Job/train uid-train pods=[train-0 train-1] checkpoint=annotation shrinkable=true problems=0",
		"JobSet/shards uid-shards pods=[shard-0] checkpoint=none shrinkable=false problems=0",
		"Deployment/web uid-web pods=[web-abc] checkpoint=none shrinkable=false problems=0",
		"StatefulSet/db uid-db pods=[db-0] checkpoint=none shrinkable=false problems=2",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d workloads: %+v", len(got), got)
	}
	for i := range want {
		if s := summary(got[i]); s != want[i] {
			t.Errorf("workload %d: %s\n             want %s", i, s, want[i])
		}
	}
	if p := strings.Join(got[4].Problems, "; "); !strings.Contains(p, `"criu" is not none or annotation`) || !strings.Contains(p, `"yes" is not true or false`) {
		t.Errorf("problems %q", p)
	}
	if got[2].APIVersion != "jobset.x-k8s.io/v1alpha2" || got[0].Namespace != "team-a" {
		t.Errorf("jobset %+v", got[2])
	}
}

func TestFindWorkloadsOwnerGone(t *testing.T) {
	env, a, _ := activityEnv(t, pod("train-0", ownedBy("batch/v1", "Job", "train"), nil))
	_, err := env.ExecuteActivity(a.FindWorkloads, FindWorkloadsInput{Pods: []PodRef{{"team-a", "train-0"}}})
	if err == nil || !strings.Contains(err.Error(), "get job team-a/train (owner of pod train-0)") {
		t.Fatalf("err %v", err)
	}
}
