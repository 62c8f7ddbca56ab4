package migration

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

func TestCheckpointHandshake(t *testing.T) {
	env, a, kube := activityEnv(t,
		pod("train-0", nil, map[string]string{kubeobj.AnnotationCheckpoint: "annotation", "team.example.com/owner": "ml"}),
		pod("train-1", nil, map[string]string{kubeobj.AnnotationCheckpointCompleted: "migrate-old"}))
	in := CheckpointInput{Namespace: "team-a", Pods: []string{"train-0", "train-1", "gone"}, ID: "migrate-1"}
	if _, err := env.ExecuteActivity(a.RequestCheckpoint, in); err != nil {
		t.Fatal(err)
	}
	p, _ := kube.CoreV1().Pods("team-a").Get(context.Background(), "train-0", metav1.GetOptions{})
	if p.Annotations[kubeobj.AnnotationCheckpointRequested] != "migrate-1" || p.Annotations["team.example.com/owner"] != "ml" {
		t.Fatalf("annotations after the request: %v", p.Annotations)
	}
	status := func() CheckpointStatus {
		t.Helper()
		v, err := env.ExecuteActivity(a.CheckpointDone, in)
		if err != nil {
			t.Fatal(err)
		}
		var st CheckpointStatus
		if err := v.Get(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// train-1's answer is to an earlier request: it does not count.
	if st := status(); st.Done || len(st.Waiting) != 2 || len(st.Gone) != 1 || st.Gone[0] != "gone" {
		t.Fatalf("before any answer: %+v", st)
	}
	for _, name := range []string{"train-0", "train-1"} {
		p, _ := kube.CoreV1().Pods("team-a").Get(context.Background(), name, metav1.GetOptions{})
		p.Annotations[kubeobj.AnnotationCheckpointCompleted] = "migrate-1"
		if _, err := kube.CoreV1().Pods("team-a").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if st := status(); st.Done != (name == "train-1") {
			t.Fatalf("after %s answered: %+v", name, st)
		}
	}
	// Every Pod gone is not a checkpoint.
	if _, err := env.ExecuteActivity(a.CheckpointDone, CheckpointInput{Namespace: "team-a", Pods: []string{"gone"}, ID: "x"}); err != nil {
		t.Fatal(err)
	}
	v, _ := env.ExecuteActivity(a.CheckpointDone, CheckpointInput{Namespace: "team-a", Pods: []string{"gone"}, ID: "x"})
	var st CheckpointStatus
	if err := v.Get(&st); err != nil || st.Done {
		t.Fatalf("all pods gone: %+v %v", st, err)
	}
}
