package sim

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// AnnotationCheckpointDelay tells the simulated workload how long it takes to save its work when
// DeviceWarden asks (a Go duration); only Pods that carry it are answered.
const AnnotationCheckpointDelay = "sim.devicewarden.io/checkpoint-delay"

// JobOptions make a Workload a Job: Pods claims from a template (one claim per Pod), the migration
// declarations on its Pod template, and how many Pods run at once (Indexed when more than one).
type JobOptions struct {
	Pods int
	// Checkpoint is none or annotation; CheckpointDelay how long the simulated workload takes to answer.
	Checkpoint      string
	CheckpointDelay time.Duration
	Shrinkable      bool
}

// CreateJob makes the claim template and a Job whose Pods keep running (as training does) until
// something moves them.
func (w Workload) CreateJob(ctx context.Context, cs kubernetes.Interface, o JobOptions) (*batchv1.Job, error) {
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: w.claimSpec()}}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(w.Namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create claim template %s: %w", w.Name, err)
	}
	pods := int32(max(1, o.Pods))
	ann := map[string]string{}
	if o.Checkpoint != "" {
		ann[kubeobj.AnnotationCheckpoint] = o.Checkpoint
	}
	if o.Checkpoint == kubeobj.CheckpointAnnotation {
		ann[AnnotationCheckpointDelay] = o.CheckpointDelay.String()
	}
	if o.Shrinkable {
		ann[kubeobj.AnnotationShrinkable] = "true"
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Spec: batchv1.JobSpec{
			Parallelism: &pods, Completions: &pods, BackoffLimit: ptr.To(int32(100)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": w.Name}, Annotations: ann},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					RestartPolicy:                corev1.RestartPolicyNever,
					ResourceClaims:               []corev1.PodResourceClaim{{Name: PodClaimName, ResourceClaimTemplateName: ptr.To(w.Name)}},
					Containers: []corev1.Container{{
						Name: "main", Image: "registry.invalid/sim-trainer:1",
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: PodClaimName}}},
					}},
					NodeSelector: map[string]string{LabelSimNode: "true"},
				},
			},
		},
	}
	if pods > 1 {
		job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	}
	created, err := cs.BatchV1().Jobs(w.Namespace).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create job %s: %w", w.Name, err)
	}
	return created, nil
}
