package sim

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// holding is a running Pod on node n whose claim is allocated GPU gpu; a check Pod when image is set.
func holding(name, gpu, image string) (*corev1.Pod, *resourcev1.ResourceClaim) {
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: apitypes.UID("u-" + name)},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "device", Driver: Driver, Pool: "n", Device: gpu}}}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.PodSpec{NodeName: "n", RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "c", Image: "train"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "device", ResourceClaimName: ptr.To(name)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c"}}}}
	if image != "" {
		pod.Labels = map[string]string{kubeobj.LabelCheck: name}
		pod.Spec.RestartPolicy, pod.Spec.Containers[0].Image = corev1.RestartPolicyNever, image
	}
	return pod, claim
}

// The simulated driver's reset reaches its baseboard: a workload still running on another GPU of
// it fails. On a node with no baseboard the reset touches its GPU alone.
func TestAResetReachesItsBaseboard(t *testing.T) {
	for _, board := range []bool{true, false} {
		ctx := context.Background()
		slice := NodeSlice("n", 4, false)
		if board {
			for i := range slice.Spec.Devices {
				slice.Spec.Devices[i].Attributes[AttrBaseboard] = resourcev1.DeviceAttribute{StringValue: ptr.To("n-board-0")}
			}
		}
		tenant, tenantClaim := holding("tenant", "gpu-2", "")
		reset, resetClaim := holding("reset", "gpu-0", ResetImage)
		cs := fake.NewClientset([]runtime.Object{slice, tenant, tenantClaim, reset, resetClaim}...)
		id := device.ID{Driver: Driver, Pool: "n", Device: "gpu-0"}
		if err := SetFaultKind(ctx, cs, id, corev1.ResourceHealthStatusUnhealthy, "XID 48", FaultTransient); err != nil {
			t.Fatal(err)
		}
		k := &Kubelet{Kube: cs}
		state, err := k.faults(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.complete(ctx, reset, state); err != nil {
			t.Fatal(err)
		}
		got, _ := cs.CoreV1().Pods("ns").Get(ctx, "tenant", metav1.GetOptions{})
		done, _ := cs.CoreV1().Pods("ns").Get(ctx, "reset", metav1.GetOptions{})
		if done.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("baseboard %t: the reset %s", board, done.Status.Phase)
		}
		failed := got.Status.Phase == corev1.PodFailed && strings.Contains(got.Status.ContainerStatuses[0].State.Terminated.Message, "the reset of "+id.String()+" on baseboard n-board-0 reached it")
		if failed != board || !board && got.Status.Phase != corev1.PodRunning {
			t.Fatalf("baseboard %t: the tenant on gpu-2 is %s", board, got.Status.Phase)
		}
	}
}
