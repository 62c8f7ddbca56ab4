package sim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Workload is a pod that needs one simulated GPU.
type Workload struct {
	Namespace string
	Name      string
	// Node and Index, when set, pin the request to one device (node's gpu-<Index>).
	Node  string
	Index *int
	// Template makes the claim come from a ResourceClaimTemplate (as Jobs do) instead of a
	// ResourceClaim created up front.
	Template bool
	// DevicePlugin requests one PluginResource (a device-plugin device) instead of a DRA claim.
	DevicePlugin bool
	// DeviceClass to request (default Driver, the class of every simulated GPU); see EnsureClass.
	DeviceClass string
	// Count is how many devices the claim asks for (default 1), e.g. 8 for a training Pod.
	Count int
	// Memory, when set (e.g. "8Gi"), asks for that share of a shared device's memory.
	Memory string
	// Profile, when set, asks for one form of a partitionable GPU: a partition profile (e.g.
	// 1g.10gb) or ProfileWhole.
	Profile string
}

// PodClaimName is the pod-level name of the workload's claim; RequestName its request.
const (
	PodClaimName = "gpu"
	RequestName  = "gpu"
)

// EnsureNamespace creates a namespace if it does not exist.
func EnsureNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

func (w Workload) claimSpec() resourcev1.ResourceClaimSpec {
	class := w.DeviceClass
	if class == "" {
		class = Driver
	}
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(max(1, w.Count))}
	expr := ""
	attr := fmt.Sprintf("device.attributes[%q]", Driver)
	if w.Node != "" {
		expr = fmt.Sprintf("%s.%s == %q", attr, AttrNode, w.Node)
	}
	if w.Index != nil {
		if expr != "" {
			expr += " && "
		}
		expr += fmt.Sprintf("%s.%s == %d", attr, AttrIndex, *w.Index)
	}
	if expr != "" {
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: expr}}}
	}
	if w.Profile != "" {
		if expr != "" {
			expr += " && "
		}
		expr += fmt.Sprintf("%s.%s == %q", attr, AttrProfile, w.Profile)
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: expr}}}
	}
	if w.Memory != "" {
		req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse(w.Memory)}}
	}
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: RequestName, Exactly: req}}}}
}

// Create makes the claim (or template) and the pod.
func (w Workload) Create(ctx context.Context, cs kubernetes.Interface) (*corev1.Pod, error) {
	if w.DevicePlugin {
		return w.createPluginPod(ctx, cs)
	}
	podClaim := corev1.PodResourceClaim{Name: PodClaimName}
	meta := metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace}
	if w.Template {
		tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: meta, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: w.claimSpec()}}
		if _, err := cs.ResourceV1().ResourceClaimTemplates(w.Namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create claim template %s: %w", w.Name, err)
		}
		podClaim.ResourceClaimTemplateName = ptr.To(w.Name)
	} else {
		claim := &resourcev1.ResourceClaim{ObjectMeta: meta, Spec: w.claimSpec()}
		if _, err := cs.ResourceV1().ResourceClaims(w.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create claim %s: %w", w.Name, err)
		}
		podClaim.ResourceClaimName = ptr.To(w.Name)
	}
	pod := &corev1.Pod{
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			ResourceClaims:               []corev1.PodResourceClaim{podClaim},
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.invalid/sim-trainer:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: PodClaimName}}},
			}},
			NodeSelector: map[string]string{LabelSimNode: "true"},
		},
	}
	created, err := cs.CoreV1().Pods(w.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", w.Name, err)
	}
	return created, nil
}

func (w Workload) createPluginPod(ctx context.Context, cs kubernetes.Interface) (*corev1.Pod, error) {
	one := corev1.ResourceList{PluginResource: *resource.NewQuantity(1, resource.DecimalSI)}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/sim-fpga:1",
				Resources: corev1.ResourceRequirements{Requests: one, Limits: one}}},
			NodeSelector: map[string]string{LabelSimNode: "true"},
		},
	}
	if w.Node != "" {
		pod.Spec.NodeSelector["kubernetes.io/hostname"] = w.Node
	}
	created, err := cs.CoreV1().Pods(w.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", w.Name, err)
	}
	return created, nil
}
