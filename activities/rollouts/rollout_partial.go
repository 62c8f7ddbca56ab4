package rollouts

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// recordedChange is the switch a rollout's enable recorded on a node (its previous owner and the
// plugin's devices then), and whether there is one.
func recordedChange(n *corev1.Node, plan string) (rolloutplan.NodeChange, bool) {
	ch := rolloutplan.NodeChange{Node: n.Name}
	rec, ok := n.Annotations[kubeobj.AnnotationRolloutPrevious]
	if !ok || !strings.HasPrefix(rec, plan+"/") {
		return ch, false
	}
	prev := strings.TrimPrefix(rec, plan+"/")
	ch.Previous, ch.HadLabel = prev, prev != unlabelled
	if !ch.HadLabel {
		ch.Previous = ""
	}
	ch.PluginDevices, _ = strconv.ParseInt(n.Annotations[kubeobj.AnnotationRolloutDevices], 10, 64)
	return ch, true
}

// switchedNodes are the nodes of a phase (by its selector) that the rollout's enable switched:
// what an enable that failed, its result lost, may have changed.
func (a *Activities) switchedNodes(ctx context.Context, plan, selector string) ([]rolloutplan.NodeChange, error) {
	if selector == "" {
		return nil, temporal.NewNonRetryableApplicationError("a partial change to undo names no node selector", ErrInvalidRolloutInput, nil)
	}
	nodes, err := a.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list nodes %q: %w", selector, err)
	}
	var out []rolloutplan.NodeChange
	for i := range nodes.Items {
		if ch, ok := recordedChange(&nodes.Items[i], plan); ok {
			out = append(out, ch)
		}
	}
	return out, nil
}
