package sim

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Kubelet plays the part of kubelet and the driver for Pods that run to completion (restartPolicy
// Never or OnFailure, as Jobs' Pods): once such a Pod runs, it fails when one of its devices is
// faulty (and reports that device's health as kubelet would) and succeeds otherwise. This is how
// probes and canaries find out whether a device was fixed.
type Kubelet struct {
	Kube kubernetes.Interface
	// Poll is how often running Pods are looked at (default 100 ms).
	Poll   time.Duration
	Logger *slog.Logger
}

// Run completes Pods until ctx ends.
func (k *Kubelet) Run(ctx context.Context) error {
	poll := k.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	logger := k.Logger
	if logger == nil {
		logger = slog.Default()
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		pods, err := k.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("status.phase", string(corev1.PodRunning)).String()})
		if err == nil {
			if lerr := k.runLoads(ctx, pods.Items, time.Now()); lerr != nil && ctx.Err() == nil {
				logger.Warn("sim kubelet: load Pods not ended", "error", lerr)
			}
			var faults faultState
			nodes := map[string]*corev1.Node{}
			for i := range pods.Items {
				if !runsToCompletion(&pods.Items[i]) || isLoad(&pods.Items[i]) {
					continue
				}
				if image := unpullable(k.node(ctx, nodes, pods.Items[i].Spec.NodeName), &pods.Items[i]); image != "" {
					if err := k.backOff(ctx, &pods.Items[i], image); err != nil && ctx.Err() == nil {
						logger.Warn("sim kubelet: pod not backed off", "pod", pods.Items[i].Namespace+"/"+pods.Items[i].Name, "error", err)
					}
					continue
				}
				if faults == nil {
					if faults, err = k.faults(ctx); err != nil {
						break
					}
				}
				if err := k.complete(ctx, &pods.Items[i], faults); err != nil && ctx.Err() == nil {
					logger.Warn("sim kubelet: pod not completed", "pod", pods.Items[i].Namespace+"/"+pods.Items[i].Name, "error", err)
				}
			}
		}
		if err != nil && ctx.Err() == nil {
			logger.Warn("sim kubelet: list pods failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// node is the Pod's node, read once per pass (nil when it cannot be read: the Pod runs as ever).
func (k *Kubelet) node(ctx context.Context, seen map[string]*corev1.Node, name string) *corev1.Node {
	if n, ok := seen[name]; ok {
		return n
	}
	n, err := k.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		n = nil
	}
	seen[name] = n
	return n
}

// runsToCompletion picks DeviceWarden's probe and canary Pods. A workload's own Pods (a training
// Job's) keep running as real ones would, until something moves them.
func runsToCompletion(pod *corev1.Pod) bool {
	return pod.Labels[kubeobj.LabelCheck] != "" && pod.Spec.RestartPolicy != corev1.RestartPolicyAlways &&
		pod.DeletionTimestamp == nil && len(pod.Status.ContainerStatuses) > 0
}

// isReset says whether the Pod runs the simulated driver's reset tool.
func isReset(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.Image == ResetImage {
			return true
		}
	}
	return false
}

// faultState is every pool's faults, read once per pass: pool -> device -> fault.
type faultState map[string]map[string]Fault

func (k *Kubelet) faults(ctx context.Context) (faultState, error) {
	list, err := k.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + Driver})
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	out := faultState{}
	for i := range list.Items {
		// A pool of partitionable GPUs has a counters slice beside its devices slice: a pool's
		// faults are every one of its slices'.
		pool := list.Items[i].Spec.Pool.Name
		for d, f := range readFaults(&list.Items[i]) {
			if out[pool] == nil {
				out[pool] = map[string]Fault{}
			}
			out[pool][d] = f
		}
	}
	return out, nil
}

// complete finishes one running Pod according to the fault state of its devices.
func (k *Kubelet) complete(ctx context.Context, pod *corev1.Pod, state faultState) error {
	devs, err := k.podDevices(ctx, pod)
	if err != nil {
		return err
	}
	type report struct {
		entry, uid string
		id         device.ID
		fault      *Fault
	}
	var reports []report
	failed := ""
	reset := isReset(pod)
	for entry, claim := range devs {
		for _, id := range claim.ids {
			r := report{entry: entry, id: id, uid: claim.uid}
			if reset {
				if err := k.resetReach(ctx, id, pod.Spec.NodeName, state); err != nil {
					return fmt.Errorf("reset %s: %w", id, err)
				}
				if err := resetRecovery(ctx, k.Kube, id); err != nil {
					return fmt.Errorf("reset %s: %w", id, err)
				}
			}
			if f, ok := state[id.Pool][id.Device]; ok && reset && f.Kind == FaultTransient {
				// The reset tool clears what a reset can clear.
				if err := SetFault(ctx, k.Kube, id, corev1.ResourceHealthStatusHealthy, ""); err != nil {
					return fmt.Errorf("reset %s: %w", id, err)
				}
			} else if ok {
				r.fault = &f
				failed = fmt.Sprintf("device %s %s: %s", id, f.Health, f.Message)
				if reset {
					failed = fmt.Sprintf("reset did not clear device %s (%s fault): %s", id, f.Kind, f.Message)
				}
			}
			reports = append(reports, r)
		}
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := k.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Status.Phase != corev1.PodRunning {
			return nil
		}
		exit, reason, phase := int32(0), "Completed", corev1.PodSucceeded
		if failed != "" {
			exit, reason, phase = 1, "Error", corev1.PodFailed
		}
		now := metav1.Now()
		cur.Status.Phase = phase
		for i := range cur.Status.ContainerStatuses {
			cs := &cur.Status.ContainerStatuses[i]
			cs.Ready, cs.Started = false, ptr.To(false)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason, Message: failed, FinishedAt: now}}
		}
		for _, r := range reports {
			health, msg := corev1.ResourceHealthStatusHealthy, ""
			if r.fault != nil {
				health, msg = r.fault.Health, r.fault.Message
			}
			for _, c := range cur.Spec.Containers {
				SetEntry(cur, Target{Namespace: cur.Namespace, Pod: cur.Name, Container: c.Name, EntryName: r.entry}, ResourceID(CDIClaimDevice, r.id, r.uid), health, msg)
			}
		}
		for i := range cur.Status.Conditions {
			if cur.Status.Conditions[i].Type == corev1.PodReady || cur.Status.Conditions[i].Type == corev1.ContainersReady {
				cur.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		_, err = k.Kube.CoreV1().Pods(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// podClaim is one claim of a pod: its UID and the simulated devices allocated to it.
type podClaim struct {
	uid string
	ids []device.ID
}

// podDevices maps each "claim:<name>" status entry of the pod to its claim.
func (k *Kubelet) podDevices(ctx context.Context, pod *corev1.Pod) (map[string]podClaim, error) {
	out := map[string]podClaim{}
	for _, rc := range pod.Spec.ResourceClaims {
		name := claimName(pod, rc)
		if name == "" {
			continue
		}
		claim, err := k.Kube.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get claim %s/%s: %w", pod.Namespace, name, err)
		}
		out["claim:"+rc.Name] = podClaim{uid: string(claim.UID), ids: allocated(claim)}
	}
	return out, nil
}

func allocated(c *resourcev1.ResourceClaim) []device.ID {
	if c.Status.Allocation == nil {
		return nil
	}
	var ids []device.ID
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == Driver {
			ids = append(ids, device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
		}
	}
	return ids
}
