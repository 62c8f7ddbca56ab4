package migration

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// CheckpointInput names a workload's Pods and the checkpoint asked of them (the migration's ID).
type CheckpointInput struct {
	Namespace string   `json:"namespace"`
	Pods      []string `json:"pods"`
	ID        string   `json:"id"`
}

// CheckpointStatus says which Pods answered the request; Gone are Pods that no longer exist.
type CheckpointStatus struct {
	Done    bool     `json:"done"`
	Waiting []string `json:"waiting,omitempty"`
	Gone    []string `json:"gone,omitempty"`
}

// RequestCheckpoint writes checkpoint-requested=<id> on each Pod (a merge patch: nothing else of
// the Pod changes; writing it again is harmless). A Pod that is gone is skipped.
func (a *Activities) RequestCheckpoint(ctx context.Context, in CheckpointInput) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kubeobj.AnnotationCheckpointRequested: in.ID}}})
	if err != nil {
		return err
	}
	for _, name := range in.Pods {
		_, err := a.Kube.CoreV1().Pods(in.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kubeobj.FieldManager})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("request checkpoint %s of pod %s/%s: %w", in.ID, in.Namespace, name, err)
		}
	}
	return nil
}

// CheckpointDone reads whether every Pod answered checkpoint-completed=<id>. An answer to an
// earlier request (another ID) does not count.
func (a *Activities) CheckpointDone(ctx context.Context, in CheckpointInput) (CheckpointStatus, error) {
	var st CheckpointStatus
	for _, name := range in.Pods {
		pod, err := a.Kube.CoreV1().Pods(in.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			st.Gone = append(st.Gone, name)
			continue
		}
		if err != nil {
			return st, fmt.Errorf("read checkpoint of pod %s/%s: %w", in.Namespace, name, err)
		}
		if pod.Annotations[kubeobj.AnnotationCheckpointCompleted] != in.ID {
			st.Waiting = append(st.Waiting, name)
		}
	}
	st.Done = len(st.Waiting) == 0 && len(st.Gone) < len(in.Pods)
	return st, nil
}
