package migration

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// These pin each answer of the Eviction API to its outcome; the e2e suite runs evictions against
// a real apiserver with a real PodDisruptionBudget.
func TestEvictPodOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		answer  error
		uid     string
		wantErr string // "" no error; else the ApplicationError type, or "other"
	}{
		{"evicted", nil, "", ""},
		{"already gone", apierrors.NewNotFound(corev1.Resource("pods"), "train-0"), "", ""},
		{"a newer pod of that name", apierrors.NewConflict(corev1.Resource("pods"), "train-0", errors.New("uid precondition")), "uid-1", ""},
		{"budget refuses", apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10), "", ErrEvictionBlocked},
		{"server error", apierrors.NewInternalError(errors.New("etcd")), "", "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, a, kube := activityEnv(t)
			var got *k8stesting.CreateActionImpl
			kube.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				c := action.(k8stesting.CreateActionImpl)
				got = &c
				return true, nil, tt.answer
			})
			_, err := env.ExecuteActivity(a.EvictPod, EvictInput{Namespace: "team-a", Pod: "train-0", UID: tt.uid})
			if got == nil {
				t.Fatal("no eviction was asked for")
			}
			var app *temporal.ApplicationError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("err %v", err)
			case tt.wantErr == ErrEvictionBlocked && (!errors.As(err, &app) || app.Type() != ErrEvictionBlocked || app.NonRetryable()):
				t.Fatalf("err %v, want a retryable %s", err, ErrEvictionBlocked)
			case tt.wantErr == "other" && err == nil:
				t.Fatal("a server error was swallowed")
			}
		})
	}
}

func TestSuspendJob(t *testing.T) {
	env, a, kube := activityEnv(t, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train"}, Spec: batchv1.JobSpec{Parallelism: ptr.To(int32(2))}})
	for _, suspend := range []bool{true, false} {
		if _, err := env.ExecuteActivity(a.SuspendJob, SuspendInput{Namespace: "team-a", Job: "train", Suspend: suspend}); err != nil {
			t.Fatal(err)
		}
		j, _ := kube.BatchV1().Jobs("team-a").Get(context.Background(), "train", metav1.GetOptions{})
		if j.Spec.Suspend == nil || *j.Spec.Suspend != suspend || *j.Spec.Parallelism != 2 {
			t.Fatalf("suspend=%v: spec %+v", suspend, j.Spec)
		}
	}
	if _, err := env.ExecuteActivity(a.SuspendJob, SuspendInput{Namespace: "team-a", Job: "gone", Suspend: true}); err == nil {
		t.Fatal("suspending a Job that does not exist succeeded")
	}
}
