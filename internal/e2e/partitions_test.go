//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/sim"
)

// The local apiserver keeps what a partitionable driver publishes (counter sets in a slice of
// their own, devices drawing on them), and the real scheduler allocates by those counters: once
// the whole gpu-0 is taken, no partition of it is, while gpu-1's partitions still are.
func TestPartitionableDevicesServed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	node, ns := "part-served-0", "part-served"
	if err := sim.CreatePartitionedNode(ctx, kube, node, 2); err != nil {
		t.Fatal(err)
	}
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
