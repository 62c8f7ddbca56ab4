package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// fleetGPUsPerNode is how many GPUs each node of a placed fleet has.
const fleetGPUsPerNode = 8

// placeFleet runs one Pod per device on simulated nodes without the scheduler: each claim is
// written allocated and reserved for its Pod, as the scheduler leaves it, and each Pod is bound
// to its node, where kwok runs it. The scheduler's DRA allocation paces a local cluster to ~9
// Pods/s at 5,000 devices; a storm bench measures what comes after.
func placeFleet(ctx context.Context, kube kubernetes.Interface, devices int, out io.Writer) ([]benchTarget, error) {
	const perNode, ns = fleetGPUsPerNode, "bench"
	nodes, err := sim.CreateNodes(ctx, kube, "bench", (devices+perNode-1)/perNode, perNode)
	if err != nil {
		return nil, err
	}
	if err := sim.EnsureNamespace(ctx, kube, ns); err != nil {
		return nil, err
	}
	targets := make([]benchTarget, devices)
	var done atomic.Int64
	stop := progress(out, "placing pods", &done, int64(devices))
	err = parallel(ctx, 32, devices, func(i int) error {
		id := device.ID{Driver: sim.Driver, Pool: nodes[i/perNode], Device: fmt.Sprintf("gpu-%d", i%perNode)}
		name := fmt.Sprintf("job-%d", i)
		claim, err := kube.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.Driver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create claim: %w", err)
		}
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: id.Pool, ResourceClaims: []corev1.PodResourceClaim{{Name: sim.PodClaimName, ResourceClaimName: ptr.To(name)}},
				Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: sim.PodClaimName}}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create pod: %w", err)
		}
		claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: id.Driver, Pool: id.Pool, Device: id.Device}}}}
		claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		if _, err := kube.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("allocate claim: %w", err)
		}
		targets[i] = benchTarget{id: id, t: sim.Target{Namespace: ns, Pod: name, Container: "main", EntryName: "claim:" + sim.PodClaimName}}
		done.Add(1)
		return nil
	})
	stop()
	if err != nil {
		return nil, err
	}
	return targets, waitRunning(ctx, kube, ns, devices, 3*time.Minute+time.Duration(devices)*20*time.Millisecond)
}

// waitRunning waits until n Pods of the namespace run with container statuses.
func waitRunning(ctx context.Context, kube kubernetes.Interface, ns string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) > 0 {
				running++
			}
		}
		if running >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d pods running", running, n)
		}
		time.Sleep(time.Second)
	}
}
