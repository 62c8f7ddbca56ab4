package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// AnnotationUnpullable lists, on a node, the images its kubelet cannot pull (comma-separated): the
// registry is unreachable from it, or the pull secret is wrong. A check Pod of such an image waits
// in ImagePullBackOff, as a real kubelet's would, until the annotation no longer names it.
const AnnotationUnpullable = "sim.devicewarden.io/unpullable-images"

// SetUnpullable says which images the node's kubelet cannot pull (none: every image pulls).
func SetUnpullable(ctx context.Context, cs kubernetes.Interface, node string, images ...string) error {
	value := any(nil)
	if len(images) > 0 {
		value = strings.Join(images, ",")
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{AnnotationUnpullable: value}}})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set unpullable images of node %s: %w", node, err)
	}
	return nil
}

// unpullable is the first image of the Pod its node cannot pull ("" when every one pulls).
func unpullable(node *corev1.Node, pod *corev1.Pod) string {
	if node == nil || node.Annotations[AnnotationUnpullable] == "" {
		return ""
	}
	missing := strings.Split(node.Annotations[AnnotationUnpullable], ",")
	for _, c := range pod.Spec.Containers {
		if slices.Contains(missing, c.Image) {
			return c.Image
		}
	}
	return ""
}

// backOff puts a Pod whose image cannot be pulled where a real kubelet leaves it: Pending, its
// containers waiting in ImagePullBackOff. Its Ready condition stays as kwok set it, so kwok's
// stage that readies Pending Pods leaves it alone; nothing DeviceWarden reads looks at it.
func (k *Kubelet) backOff(ctx context.Context, pod *corev1.Pod, image string) error {
	cur := pod.DeepCopy()
	cur.Status.Phase = corev1.PodPending
	for i := range cur.Status.ContainerStatuses {
		cs := &cur.Status.ContainerStatuses[i]
		cs.Ready, cs.Started = false, nil
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
			Message: fmt.Sprintf("Back-off pulling image %q: the simulated registry is unreachable from node %s", image, pod.Spec.NodeName)}}
	}
	_, err := k.Kube.CoreV1().Pods(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err
}
