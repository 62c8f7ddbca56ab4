package migration

import (
	"context"
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// PodRef names a Pod that uses a failed device.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// FindWorkloadsInput lists the Pods on a failed device.
type FindWorkloadsInput struct {
	Pods []PodRef `json:"pods"`
}

// FindWorkloads follows each Pod's controller owner references up to the workload that owns it
// and reads how the workload declares itself. A Pod that is gone is skipped: nothing runs there
// any more. Pods of one workload are grouped.
func (a *Activities) FindWorkloads(ctx context.Context, in FindWorkloadsInput) ([]api.Workload, error) {
	byUID := map[string]*api.Workload{}
	var order []string
	for _, ref := range in.Pods {
		pod, err := a.Kube.CoreV1().Pods(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get pod %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		w, err := a.ownerOf(ctx, pod)
		if err != nil {
			return nil, err
		}
		if got, ok := byUID[w.UID]; ok {
			got.Pods = append(got.Pods, pod.Name)
			continue
		}
		w.Pods = []string{pod.Name}
		byUID[w.UID] = &w
		order = append(order, w.UID)
	}
	out := make([]api.Workload, 0, len(order))
	for _, uid := range order {
		w := byUID[uid]
		sort.Strings(w.Pods)
		out = append(out, *w)
	}
	return out, nil
}

// ownerOf walks a Pod's controller references: ReplicaSet -> Deployment, Job -> JobSet; any other
// controller (StatefulSet, a custom one) is the workload itself.
func (a *Activities) ownerOf(ctx context.Context, pod *corev1.Pod) (api.Workload, error) {
	w := api.Workload{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
	w.Checkpoint, w.Shrinkable, w.Problems = declarations(pod.Annotations)
	owner := metav1.GetControllerOf(pod)
	for owner != nil {
		w.Kind, w.APIVersion, w.Name, w.UID = owner.Kind, owner.APIVersion, owner.Name, string(owner.UID)
		var meta *metav1.ObjectMeta
		switch {
		case owner.Kind == "ReplicaSet" && owner.APIVersion == "apps/v1":
			rs, err := a.Kube.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
			if err != nil {
				return w, fmt.Errorf("get replicaset %s/%s (owner of pod %s): %w", pod.Namespace, owner.Name, pod.Name, err)
			}
			meta = &rs.ObjectMeta
		case owner.Kind == "Job" && owner.APIVersion == "batch/v1":
			job, err := a.Kube.BatchV1().Jobs(pod.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
			if err != nil {
				return w, fmt.Errorf("get job %s/%s (owner of pod %s): %w", pod.Namespace, owner.Name, pod.Name, err)
			}
			meta = &job.ObjectMeta
		default:
			return w, nil
		}
		owner = metav1.GetControllerOf(meta)
	}
	return w, nil
}

// declarations reads a Pod's migration annotations; a value it does not know is a problem, and the
// safe reading (no checkpoint, not shrinkable) stands.
func declarations(ann map[string]string) (checkpoint string, shrinkable bool, problems []string) {
	checkpoint = kubeobj.CheckpointNone
	switch v := strings.TrimSpace(ann[kubeobj.AnnotationCheckpoint]); v {
	case "", kubeobj.CheckpointNone:
	case kubeobj.CheckpointAnnotation:
		checkpoint = v
	default:
		problems = append(problems, fmt.Sprintf("%s=%q is not %s or %s: taken as %s", kubeobj.AnnotationCheckpoint, v, kubeobj.CheckpointNone, kubeobj.CheckpointAnnotation, kubeobj.CheckpointNone))
	}
	switch v := strings.TrimSpace(ann[kubeobj.AnnotationShrinkable]); v {
	case "", "false":
	case "true":
		shrinkable = true
	default:
		problems = append(problems, fmt.Sprintf("%s=%q is not true or false: taken as false", kubeobj.AnnotationShrinkable, v))
	}
	return checkpoint, shrinkable, problems
}
