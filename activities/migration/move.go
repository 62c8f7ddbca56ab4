package migration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
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

// SuspendInput suspends or resumes a Job, or a JobSet when Kind says so.
type SuspendInput struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Suspend   bool   `json:"suspend"`
	// Kind and APIVersion name a JobSet (JobSet, jobset.x-k8s.io/...); empty means a batch/v1 Job.
	Kind       string `json:"kind,omitempty"`
	APIVersion string `json:"apiVersion,omitempty"`
}

// SuspendJob sets spec.suspend on a Job or a JobSet: suspending deletes its running Pods (the Job or
// JobSet controller does, as for any suspended one) and resuming lets it create them again, where
// the scheduler finds devices.
func (a *Activities) SuspendJob(ctx context.Context, in SuspendInput) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"suspend": in.Suspend}})
	if err != nil {
		return err
	}
	if in.Kind == "JobSet" {
		// No typed client for the JobSet API: a merge patch on its path, through the clientset's
		// REST client (the RBAC rule is on jobsets.jobset.x-k8s.io).
		err = a.Kube.BatchV1().RESTClient().Patch(types.MergePatchType).
			AbsPath("/apis", in.APIVersion, "namespaces", in.Namespace, "jobsets", in.Job).
			Body(patch).Do(ctx).Error()
	} else {
		_, err = a.Kube.BatchV1().Jobs(in.Namespace).Patch(ctx, in.Job, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kubeobj.FieldManager})
	}
	if err != nil {
		return fmt.Errorf("set suspend=%t on %s %s/%s: %w", in.Suspend, strings.ToLower(kindOrJob(in.Kind)), in.Namespace, in.Job, err)
	}
	return nil
}

func kindOrJob(kind string) string {
	if kind == "" {
		return "Job"
	}
	return kind
}
