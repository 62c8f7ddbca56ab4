package sim

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// Checkpointer plays a workload's own code in the checkpoint handshake: a Pod that declares
// checkpoint=annotation and carries AnnotationCheckpointDelay answers checkpoint-requested=<id>
// with checkpoint-completed=<id> once that delay passed since it saw the request.
type Checkpointer struct {
	Kube kubernetes.Interface
	// Poll is how often Pods are looked at (default 200 ms).
	Poll   time.Duration
	Logger *slog.Logger
}

// Run answers requests until ctx ends.
func (c *Checkpointer) Run(ctx context.Context) error {
	poll := c.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	logger := c.Logger
	if logger == nil {
		logger = slog.Default()
	}
	seen := map[string]time.Time{} // pod UID + request ID -> when the request was first seen
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		pods, err := c.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err == nil {
			now := time.Now()
			for _, p := range pods.Items {
				id := p.Annotations[kubeobj.AnnotationCheckpointRequested]
				delay, derr := time.ParseDuration(p.Annotations[AnnotationCheckpointDelay])
				if id == "" || derr != nil || p.Annotations[kubeobj.AnnotationCheckpoint] != kubeobj.CheckpointAnnotation ||
					p.Annotations[kubeobj.AnnotationCheckpointCompleted] == id {
					continue
				}
				key := string(p.UID) + "/" + id
				if _, ok := seen[key]; !ok {
					seen[key] = now
				}
				if now.Sub(seen[key]) < delay {
					continue
				}
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kubeobj.AnnotationCheckpointCompleted: id}}})
				if _, err := c.Kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
					logger.Warn("sim workload: checkpoint not answered", "pod", p.Namespace+"/"+p.Name, "error", err)
				}
			}
		} else if ctx.Err() == nil {
			logger.Warn("sim workload: list pods failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
