//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// The local apiserver keeps what a partitionable driver publishes (counter sets in a slice of
// their own, devices drawing on them), and the real scheduler allocates by those counters: once
// the whole gpu-0 is taken, no partition of it is, while gpu-1's partitions still are.
func TestPartitionableDevicesServed(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	ns := "part-served"
	names, err := sim.CreatePartitionedNodes(ctx, kube, "part-served", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	node := names[0]
	counters, err := kube.ResourceV1().ResourceSlices().Get(ctx, node+"-gpu.sim-counters", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	devices, err := kube.ResourceV1().ResourceSlices().Get(ctx, sim.SliceName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(counters.Spec.SharedCounters) != 2 || len(devices.Spec.Devices) == 0 || len(devices.Spec.Devices[0].ConsumesCounters) != 1 {
		t.Fatalf("the apiserver dropped partitionable fields (is DRAPartitionableDevices off?): %d counter sets, first device consumes %d",
			len(counters.Spec.SharedCounters), len(devices.Spec.Devices[0].ConsumesCounters))
	}
	whole := sim.Workload{Namespace: ns, Name: "whole-gpu-0", Node: node, Index: ptr.To(0), Profile: sim.ProfileWhole}
	runningPod(t, ctx, kube, whole)
	other := sim.Workload{Namespace: ns, Name: "part-gpu-1", Node: node, Index: ptr.To(1), Profile: "1g.10gb"}
	runningPod(t, ctx, kube, other)
	refused := sim.Workload{Namespace: ns, Name: "part-gpu-0", Node: node, Index: ptr.To(0), Profile: "1g.10gb"}
	if _, err := refused.Create(ctx, kube); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "a partition of the taken gpu-0 unschedulable", func() error {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, refused.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("a partition of gpu-0 was scheduled to %s while the whole gpu-0 is allocated", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", p.Status.Conditions)
	})
}

// `sim nodes --partitions` publishes partitionable GPUs, and a fault set on one partition is the
// physical GPU's: every form of gpu-0 carries it, no form of gpu-1 does; Healthy on the whole
// device clears them all.
func TestSimPartitionsFaultThePhysicalGPU(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := shared.kubeCLI(ctx, "sim", "nodes", "--partitions", "--count", "1", "--devices", "2", "--prefix", "part-fault"); err != nil ||
		!strings.Contains(out, "1 nodes with 2 partitionable GPUs each (10 forms per GPU") {
		t.Fatalf("sim nodes --partitions: %v\n%s", err, out)
	}
	if out, err := shared.kubeCLI(ctx, "sim", "nodes", "--partitions", "--devices", "9"); err == nil || !strings.Contains(out+err.Error(), "at most 8 GPUs") {
		t.Fatalf("9 partitionable GPUs on a node: %v\n%s", err, out)
	}
	node := sim.NodeName("part-fault", 0)
	faults := func() map[string]sim.Fault {
		s, err := shared.kube.ResourceV1().ResourceSlices().Get(ctx, sim.SliceName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]sim.Fault{}
		if v := s.Annotations[sim.AnnotationFaults]; v != "" {
			if err := json.Unmarshal([]byte(v), &out); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	part := device.ID{Driver: sim.Driver, Pool: node, Device: sim.PartitionName(0, "3g.40gb", 1)}
	if err := sim.SetFault(ctx, shared.kube, part, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	got := faults()
	if len(got) != sim.FormsPerGPU {
		t.Fatalf("%d devices faulted, want the %d forms of gpu-0: %v", len(got), sim.FormsPerGPU, got)
	}
	for name := range got {
		if name != "gpu-0" && !strings.HasPrefix(name, "gpu-0-mig-") {
			t.Fatalf("%s faulted: not a form of gpu-0", name)
		}
	}
	if err := sim.SetFault(ctx, shared.kube, device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-0"}, corev1.ResourceHealthStatusHealthy, ""); err != nil {
		t.Fatal(err)
	}
	if got := faults(); len(got) != 0 {
		t.Fatalf("after Healthy on the whole device: %v", got)
	}
}
