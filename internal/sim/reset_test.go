package sim

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// The simulated driver's reset tool clears a transient fault and exits 0; a reboot or permanent
// fault it leaves standing, and exits 1. Any other Pod on a faulty device fails, as before.
func TestResetToolClearsOnlyTransientFaults(t *testing.T) {
	for _, tt := range []struct {
		kind, image string
		want        corev1.PodPhase
		cleared     bool
	}{
		{FaultTransient, ResetImage, corev1.PodSucceeded, true},
		{FaultReboot, ResetImage, corev1.PodFailed, false},
		{FaultPermanent, ResetImage, corev1.PodFailed, false},
		{FaultTransient, "probe", corev1.PodFailed, false},
	} {
		t.Run(tt.kind+" "+tt.image, func(t *testing.T) {
			ctx := context.Background()
			id := device.ID{Driver: Driver, Pool: "n", Device: "gpu-0"}
			claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u"},
				Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
					Results: []resourcev1.DeviceRequestAllocationResult{{Request: "device", Driver: id.Driver, Pool: id.Pool, Device: id.Device}}}}}}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{kubeobj.LabelCheck: "p"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: tt.image}},
					ResourceClaims: []corev1.PodResourceClaim{{Name: "device", ResourceClaimName: ptr.To("c")}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c"}}}}
			cs := fake.NewClientset(NodeSlice("n", 2, false), claim, pod)
			if err := SetFaultKind(ctx, cs, id, corev1.ResourceHealthStatusUnhealthy, "XID 79", tt.kind); err != nil {
				t.Fatal(err)
			}
			k := &Kubelet{Kube: cs}
			state, err := k.faults(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.complete(ctx, pod, state); err != nil {
				t.Fatal(err)
			}
			got, _ := cs.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			after, _ := k.faults(ctx)
			_, stands := after["n"]["gpu-0"]
			if got.Status.Phase != tt.want || stands == tt.cleared {
				t.Fatalf("phase %s (want %s), fault still there %t", got.Status.Phase, tt.want, stands)
			}
		})
	}
}
