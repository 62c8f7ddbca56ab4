package sim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
)

// AttrBaseboard names the baseboard a simulated GPU sits on. The GPUs of one baseboard are one
// reset domain, as an NVSwitch baseboard's are: the simulated driver's reset of one of them
// reaches every one, and a workload still running on another fails with it. GPUs that publish no
// baseboard are reset alone.
const AttrBaseboard = "baseboard"

// CreateBaseboardNodes creates count kwok nodes like CreateNodes whose devices all sit on one
// baseboard per node (AttrBaseboard "<node>-board-0").
func CreateBaseboardNodes(ctx context.Context, cs kubernetes.Interface, prefix string, count, devices int) ([]string, error) {
	return createNodes(ctx, cs, prefix, count, func(node string) []*resourcev1.ResourceSlice {
		s := nodeSlice(node, devices, false)
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].Attributes[AttrBaseboard] = resourcev1.DeviceAttribute{StringValue: ptr.To(node + "-board-0")}
		}
		return []*resourcev1.ResourceSlice{s}
	})
}

// resetReach does to the other GPUs of id's baseboard what a reset of id does to them: it fails
// every running Pod (not a check) holding one, as a real reset would have ended their jobs, and
// clears what a reset clears on each (a transient fault, DCGM's GPU_RESET recovery action).
func (k *Kubelet) resetReach(ctx context.Context, id device.ID, node string, state faultState) error {
	slices, err := k.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + Driver})
	if err != nil {
		return fmt.Errorf("list resource slices: %w", err)
	}
	board, peers := "", map[device.ID]bool{}
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if s.Spec.Pool.Name == id.Pool && d.Name == id.Device && d.Attributes[AttrBaseboard].StringValue != nil {
				board = *d.Attributes[AttrBaseboard].StringValue
			}
		}
	}
	if board == "" {
		return nil
	}
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if b := d.Attributes[AttrBaseboard].StringValue; b != nil && *b == board && !(s.Spec.Pool.Name == id.Pool && d.Name == id.Device) {
				peers[device.ID{Driver: Driver, Pool: s.Spec.Pool.Name, Device: d.Name}] = true
			}
		}
	}
	pods, err := k.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", node), fields.OneTermEqualSelector("status.phase", string(corev1.PodRunning))).String()})
	if err != nil {
		return fmt.Errorf("list the pods of node %s: %w", node, err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if runsToCompletion(pod) {
			continue // a check of its own
		}
		devs, err := k.podDevices(ctx, pod)
		if err != nil {
			continue // its claim is gone: it holds nothing the reset reaches
		}
		for _, c := range devs {
			for _, d := range c.ids {
				if peers[d] {
					if err := k.failPod(ctx, pod, fmt.Sprintf("GPU %s lost: the reset of %s on baseboard %s reached it", d, id, board)); err != nil {
						return err
					}
				}
			}
		}
	}
	for p := range peers {
		if err := resetRecovery(ctx, k.Kube, p); err != nil {
			return fmt.Errorf("reset %s with %s: %w", p, id, err)
		}
		if f, ok := state[p.Pool][p.Device]; ok && f.Kind == FaultTransient {
			if err := SetFault(ctx, k.Kube, p, corev1.ResourceHealthStatusHealthy, ""); err != nil {
				return fmt.Errorf("reset %s with %s: %w", p, id, err)
			}
		}
	}
	return nil
}

// failPod ends a running Pod as failed, its containers exited 1 with why.
func (k *Kubelet) failPod(ctx context.Context, pod *corev1.Pod, why string) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := k.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.Status.Phase != corev1.PodRunning {
			return err
		}
		cur.Status.Phase = corev1.PodFailed
		for i := range cur.Status.ContainerStatuses {
			cs := &cur.Status.ContainerStatuses[i]
			cs.Ready, cs.Started = false, ptr.To(false)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: why, FinishedAt: metav1.Now()}}
		}
		_, err = k.Kube.CoreV1().Pods(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}
