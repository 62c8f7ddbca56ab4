package remediation

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// The current review's own canary Job is adopted, not deleted and recreated.
func TestClearStaleAdoptsTheCurrentCanaryJob(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "checks", Name: "canary-1", Labels: map[string]string{kubeobj.LabelReview: "2"}}}
	_, a, kube := activityEnv(t, job)
	if err := (checkPods{a}).clearStale(context.Background(), decide.ActCanary, "checks", "canary-1", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.BatchV1().Jobs("checks").Get(context.Background(), "canary-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("the review's own Job was removed: %v", err)
	}
}

func TestSchedulingReason(t *testing.T) {
	pod := func(c corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Message: "not ready"}, c}}}
	}
	for _, c := range []struct {
		cond corev1.PodCondition
		want string
	}{
		{corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/3 nodes are available"}, ": 0/3 nodes are available"},
		{corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, Message: "scheduled"}, ""},
		{corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}, ""},
	} {
		if got := scheduling(pod(c.cond)); got != c.want {
			t.Errorf("%+v: %q, want %q", c.cond, got, c.want)
		}
	}
}
