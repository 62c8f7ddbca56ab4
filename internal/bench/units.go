package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// UnitsOptions configures the partitioned-GPU fence benchmark.
type UnitsOptions struct {
	// Nodes is how many nodes of 8 partitionable GPUs (and as many of 8 plain GPUs) to use.
	Nodes    int
	CacheDir string
	Out      io.Writer
}

// unitGPUs is how many GPUs each node has, as on a training node.
const unitGPUs = 8

// Units measures, on one fresh stack, how long a partition's Unhealthy report takes to fence
// every form of its GPU (the whole device and its partitions, sim.FormsPerGPU rules), against a
// plain GPU's single rule on the same stack: one GPU at a time, one Pod on a 1g.10gb partition
// of each partitionable GPU and one Pod on each plain GPU.
func Units(ctx context.Context, o UnitsOptions) error {
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{}, nil)
	if err != nil {
		return err
	}
	defer st.stop()
	kube := st.kube
	plain, err := setupPods(ctx, kube, o.Nodes*unitGPUs, o.Out)
	if err != nil {
		return err
	}
	parts, err := setupPartitionPods(ctx, kube, o.Nodes, o.Out)
	if err != nil {
		return err
	}
	seen, stopWatch, err := watchRules(ctx, kube, watch.Added)
	if err != nil {
		return err
	}
	defer stopWatch()
	fmt.Fprintf(o.Out, "[bench] flipping %d plain GPUs and %d partitions (one per GPU) Unhealthy, one at a time, alternating\n", len(plain), len(parts))
	var single, first, whole []time.Duration
	for i := range parts {
		_, lat, err := flip(ctx, kube, plain[i], []device.ID{plain[i].id}, seen)
		if err != nil {
			return err
		}
		single = append(single, lat[0])
		var forms []device.ID
		for _, d := range partitionedForms(parts[i].id) {
			forms = append(forms, device.ID{Driver: parts[i].id.Driver, Pool: parts[i].id.Pool, Device: d})
		}
		_, lat, err = flip(ctx, kube, parts[i], forms, seen)
		if err != nil {
			return err
		}
		first, whole = append(first, minOf(lat)), append(whole, maxOf(lat))
	}
	printLatency(o.Out, "plain GPU: status write -> its DeviceTaintRule visible", single)
	printLatency(o.Out, fmt.Sprintf("partition: status write -> first of its GPU's %d rules visible", sim.FormsPerGPU), first)
	printLatency(o.Out, fmt.Sprintf("partition: status write -> all %d rules of its GPU visible", sim.FormsPerGPU), whole)
	return nil
}

// flip writes Unhealthy into the target's status and returns when it wrote it and, per rule
// wanted, how long until the rule was seen.
func flip(ctx context.Context, kube kubernetes.Interface, tg benchTarget, rules []device.ID, seen func(string) <-chan time.Time) (time.Time, []time.Duration, error) {
	pod, err := kube.CoreV1().Pods(tg.t.Namespace).Get(ctx, tg.t.Pod, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, nil, err
	}
	if !sim.SetEntry(pod, tg.t, sim.CDIDeviceID(tg.id), corev1.ResourceHealthStatusUnhealthy, "bench") {
		return time.Time{}, nil, fmt.Errorf("pod %s has no container status", tg.t.Pod)
	}
	start := time.Now()
	if _, err := kube.CoreV1().Pods(tg.t.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return time.Time{}, nil, fmt.Errorf("write status: %w", err)
	}
	out := make([]time.Duration, 0, len(rules))
	for _, id := range rules {
		select {
		case at := <-seen(id.TaintRuleName()):
			out = append(out, at.Sub(start))
		case <-time.After(30 * time.Second):
			return time.Time{}, nil, fmt.Errorf("no DeviceTaintRule for %s after 30s (report on %s)", id, tg.id)
		case <-ctx.Done():
			return time.Time{}, nil, ctx.Err()
		}
	}
	return start, out, nil
}

// partitionedForms are the device names of the GPU a partition belongs to (sim.PartitionedSlices).
func partitionedForms(part device.ID) []string {
	var i int
	if _, err := fmt.Sscanf(part.Device, "gpu-%d-", &i); err != nil {
		return nil
	}
	out := []string{fmt.Sprintf("gpu-%d", i)}
	for _, p := range sim.Profiles {
		for k := range int(7 / p.Slices) {
			out = append(out, sim.PartitionName(i, p.Name, k))
		}
	}
	return out
}

// setupPartitionPods runs, on nodes of 8 partitionable GPUs, one Pod on a 1g.10gb partition of
// each GPU, and returns them with the partition each was allocated.
func setupPartitionPods(ctx context.Context, kube kubernetes.Interface, nodes int, out io.Writer) ([]benchTarget, error) {
	names, err := sim.CreatePartitionedNodes(ctx, kube, "bench-part", nodes, unitGPUs)
	if err != nil {
		return nil, err
	}
	const ns = "bench-part"
	if err := sim.EnsureNamespace(ctx, kube, ns); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "[bench] starting %d pods, one on a partition of each GPU, on %d partitioned nodes\n", nodes*unitGPUs, nodes)
	var targets []benchTarget
	for i := range nodes * unitGPUs {
		name := fmt.Sprintf("part-%d", i)
		w := sim.Workload{Namespace: ns, Name: name, Node: names[i/unitGPUs], Index: ptr.To(i % unitGPUs), Profile: "1g.10gb"}
		if _, err := w.Create(ctx, kube); err != nil {
			return nil, err
		}
		targets = append(targets, benchTarget{t: sim.Target{Namespace: ns, Pod: name, Container: "main", EntryName: "claim:" + sim.PodClaimName}})
	}
	if err := waitRunning(ctx, kube, ns, len(targets), 3*time.Minute); err != nil {
		return nil, err
	}
	for i := range targets {
		id, err := allocated(ctx, kube, ns, targets[i].t.Pod)
		if err != nil {
			return nil, err
		}
		targets[i].id = id
	}
	return targets, nil
}

// allocated is the device a running Pod's one claim was allocated.
func allocated(ctx context.Context, kube kubernetes.Interface, ns, pod string) (device.ID, error) {
	p, err := kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return device.ID{}, err
	}
	for _, rc := range p.Spec.ResourceClaims {
		name := ptr.Deref(rc.ResourceClaimName, "")
		if name == "" {
			continue
		}
		c, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return device.ID{}, err
		}
		if c.Status.Allocation != nil && len(c.Status.Allocation.Devices.Results) > 0 {
			r := c.Status.Allocation.Devices.Results[0]
			return device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}, nil
		}
	}
	return device.ID{}, fmt.Errorf("pod %s/%s has no allocated claim", ns, pod)
}

func minOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = min(m, d)
	}
	return m
}

func maxOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = max(m, d)
	}
	return m
}
