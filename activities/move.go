package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/temporal"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ErrEvictionBlocked is the (retryable) error type of an eviction a PodDisruptionBudget refused:
// the migration retries it with backoff and never goes around the budget.
const ErrEvictionBlocked = "EvictionBlocked"

// EvictInput names one Pod to move through the Eviction API.
type EvictInput struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// UID pins the eviction to the Pod the migration saw, not a newer Pod of the same name.
	UID string `json:"uid,omitempty"`
}

// EvictPod asks the API to evict the Pod, so PodDisruptionBudgets are respected. A budget's refusal
// (429) is an ErrEvictionBlocked error carrying the API's message, retried by the workflow; a Pod
// already gone, or replaced by a newer one of the same name, needs nothing.
func (a *Activities) EvictPod(ctx context.Context, in EvictInput) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: in.Pod, Namespace: in.Namespace}}
	if in.UID != "" {
		uid := types.UID(in.UID)
		ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	}
	err := a.Kube.CoreV1().Pods(in.Namespace).EvictV1(ctx, ev)
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err) && in.UID != "":
		return nil // the Pod of that name is a newer one: the one we meant is gone
	case apierrors.IsTooManyRequests(err):
		return temporal.NewApplicationError(fmt.Sprintf("eviction of %s/%s blocked: %v", in.Namespace, in.Pod, err), ErrEvictionBlocked)
	}
	return fmt.Errorf("evict pod %s/%s: %w", in.Namespace, in.Pod, err)
}

// SuspendInput suspends or resumes a Job.
type SuspendInput struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Suspend   bool   `json:"suspend"`
}

// SuspendJob sets a Job's spec.suspend: suspending deletes its running Pods (the Job controller
// does, as for any suspended Job) and resuming lets it create them again, where the scheduler
// finds devices.
func (a *Activities) SuspendJob(ctx context.Context, in SuspendInput) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"suspend": in.Suspend}})
	if err != nil {
		return err
	}
	if _, err := a.Kube.BatchV1().Jobs(in.Namespace).Patch(ctx, in.Job, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("set suspend=%t on job %s/%s: %w", in.Suspend, in.Namespace, in.Job, err)
	}
	return nil
}
