//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// domainMoveClass devices (on the nodes dom-move-*) climb a ladder of one reset that moves the
// holders of its domain's other devices first.
const domainMoveClass = "domain-move.gpu.sim.devicewarden.io"

// On an 8-GPU baseboard, a reset-first fault on GPU 0 while a checkpointing Job runs on another GPU
// of the baseboard (holders: move): the baseboard's other GPUs are fenced, the Job moves to another
// node with the migration, then the reset runs; the fences go, and the device is released. The Job
// is moved, never failed.
func TestAResetMovesItsBaseboardsJobFirst(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	classOnNodes(t, ctx, shared.kube, domainMoveClass, "dom-move-")
	nodes, err := sim.CreateBaseboardNodes(ctx, kube, "dom-move", 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	ns := "dom-move"
	bad := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	reporter := runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "reporter", Node: nodes[0], Index: ptr.To(0), DeviceClass: domainMoveClass})
	job := sim.Workload{Namespace: ns, Name: "train", DeviceClass: domainMoveClass}
	_, ids := runningJob(t, ctx, job, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: time.Second})
	if ids[0].Pool != nodes[0] || ids[0] == bad {
		t.Fatalf("the Job runs on %s, not on another GPU of %s", ids[0], nodes[0])
	}
	// A second baseboard, for the Job to move to.
	if nodes, err = sim.CreateBaseboardNodes(ctx, kube, "dom-move", 2, 8); err != nil {
		t.Fatal(err)
	}
	faultAndQuarantine(t, ctx, shared, bad, "XID 48", sim.FaultTransient)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, reporter.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	if len(q.Ladder.Tries) != 1 || !q.Ladder.Tries[0].Result.Passed {
		t.Fatalf("tries %+v", q.Ladder.Tries)
	}
	pods, err := jobPods(ctx, kube, ns, "train")
	if err != nil || len(pods) != 1 || pods[0].Spec.NodeName != nodes[1] {
		t.Fatalf("the Job's Pods %v (%v): not moved to %s", len(pods), err, nodes[1])
	}
	rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(nodes[0])})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules.Items {
		if r.Spec.Taint.Key == kubeobj.TaintDomainReset {
			t.Fatalf("a domain fence outlived the reset: %s", r.Name)
		}
	}
	t.Logf("time to repair, the baseboard's Job moved first: %s (%d migrations)", q.ClosedAt.Sub(q.CreatedAt), len(st.Migrations))
}
