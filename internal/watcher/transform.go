package watcher

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stripPod keeps only what the watcher reads of a pod it tracks.
func stripPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion}}
	out.Spec.NodeName = p.Spec.NodeName
	out.Status.Phase = p.Status.Phase
	if len(p.Spec.ResourceClaims) == 0 {
		return out
	}
	out.Spec.ResourceClaims = p.Spec.ResourceClaims
	out.Status.ResourceClaimStatuses = p.Status.ResourceClaimStatuses
	for _, cs := range p.Status.ContainerStatuses {
		if len(cs.AllocatedResourcesStatus) > 0 {
			out.Status.ContainerStatuses = append(out.Status.ContainerStatuses,
				corev1.ContainerStatus{Name: cs.Name, AllocatedResourcesStatus: cs.AllocatedResourcesStatus})
		}
	}
	return out
}
