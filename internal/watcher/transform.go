package watcher

import (
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// strip keeps only what the watcher reads, so the caches of a large fleet stay small.
func strip(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return stripPod(o), nil
	case *resourcev1.ResourceClaim:
		return stripClaim(o), nil
	}
	return obj, nil
}

func meta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
}

func stripPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{ObjectMeta: meta(p.ObjectMeta)}
	out.Spec.NodeName = p.Spec.NodeName
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

func stripClaim(c *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	out := &resourcev1.ResourceClaim{ObjectMeta: meta(c.ObjectMeta)}
	// Keep only request names and classes: the class selects the device's policy.
	for _, r := range c.Spec.Devices.Requests {
		kept := resourcev1.DeviceRequest{Name: r.Name}
		if r.Exactly != nil {
			kept.Exactly = &resourcev1.ExactDeviceRequest{DeviceClassName: r.Exactly.DeviceClassName}
		}
		for _, s := range r.FirstAvailable {
			kept.FirstAvailable = append(kept.FirstAvailable, resourcev1.DeviceSubRequest{Name: s.Name, DeviceClassName: s.DeviceClassName})
		}
		out.Spec.Devices.Requests = append(out.Spec.Devices.Requests, kept)
	}
	if a := c.Status.Allocation; a != nil {
		out.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: a.Devices.Results}}
	}
	return out
}
