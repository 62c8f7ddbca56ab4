//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// A fault only a reboot clears, on a node where another device runs a checkpointing Job: the
// reset fails, the node step fences the node's devices (no new claim lands there), moves the Job
// to another node with the migration, then asks for the reboot; the fences go, and the device is
// proven and released. Nobody is involved.
func TestNodeStepMovesTheNodesHoldersFirst(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kube := shared.kube
	classOnNodes(t, ctx, shared.kube, moveClass, "rep-move-")
	nodes, err := sim.CreateNodes(ctx, kube, "rep-move", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	ns := "rep-move"
	bad := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	reporter := runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "reporter", Node: nodes[0], Index: ptr.To(0), DeviceClass: moveClass})
	// The Job gets the node's other device: the only one left.
	job := sim.Workload{Namespace: ns, Name: "train", DeviceClass: moveClass}
	pods, ids := runningJob(t, ctx, job, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: time.Second})
	if ids[0].Pool != nodes[0] {
		t.Fatalf("the Job runs on %s, not on %s", ids[0], nodes[0])
	}
	// A second node, for the Job to move to.
	if nodes, err = sim.CreateNodes(ctx, kube, "rep-move", 2, 2); err != nil {
		t.Fatal(err)
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bootBefore := node.Status.NodeInfo.BootID
	faultAndQuarantine(t, ctx, shared, bad, "GPU has fallen off the bus (no XID given)", sim.FaultReboot)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, reporter.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	// The node step finds the Job: the node is fenced and the Job moves.
	eventually(t, 2*time.Minute, "the node fenced", func() error {
		rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.LabelNode + "=" + kubeobj.LabelValue(nodes[0])})
		if err != nil {
			return err
		}
		for _, r := range rules.Items {
			if r.Spec.Taint.Key == kubeobj.TaintNodeRepair && r.Spec.Taint.Effect == resourcev1.DeviceTaintEffectNoSchedule && *r.Spec.DeviceSelector.Pool == nodes[0] {
				return nil
			}
		}
		return fmt.Errorf("%d rules, no fence", len(rules.Items))
	})
	st := waitState(t, ctx, shared, bad, 3*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	l := q.Ladder
	if l == nil || len(l.Tries) != 2 || l.Tries[1].Kind != policy.RepairNode || !l.Tries[1].Result.Passed || !strings.Contains(l.Tries[1].Result.Reason, "booted again") {
		t.Fatalf("ladder %+v", l)
	}
	// The first migration is the reporter's (its owner deleted it); the last moved the Job.
	if len(st.Migrations) != 2 {
		t.Fatalf("migrations %v", st.Migrations)
	}
	if m := migrationResult(t, ctx, st.Migrations[1]); m.Outcome != migrationplan.OutcomeMigrated {
		t.Fatalf("the Job's migration: %+v", m)
	}
	now, err := jobPods(ctx, kube, ns, job.Name)
	if err != nil || len(now) != 1 || now[0].UID == pods[0].UID {
		t.Fatalf("the Job's pods after the move: %v (%v)", now, err)
	}
	if moved, err := podDevice(ctx, kube, now[0]); err != nil || moved.Pool != nodes[1] {
		t.Fatalf("the Job runs on %s (%v), want node %s", moved, err, nodes[1])
	}
	if node, err = kube.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{}); err != nil || node.Status.NodeInfo.BootID == bootBefore {
		t.Fatalf("node %s did not reboot (%v)", nodes[0], err)
	}
	rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.LabelNode + "=" + kubeobj.LabelValue(nodes[0])})
	if err != nil || len(rules.Items) != 0 {
		t.Fatalf("fences left after the reboot: %v (%v)", rules.Items, err)
	}
	t.Logf("time to repair (quarantined to released), the Job moved first: %s; node step: %s", q.ClosedAt.Sub(q.CreatedAt).Round(time.Second), l.Tries[1].Result.Reason)
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_repair_move.json")
}

// classOnNodes makes a DeviceClass that offers only the simulated devices of the nodes named
// prefix*: a test's workloads can go nowhere else.
func classOnNodes(t *testing.T, ctx context.Context, kube kubernetes.Interface, name, prefix string) {
	t.Helper()
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
		CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].%s.startsWith(%q)`, sim.Driver, sim.Driver, sim.AttrNode, prefix)}}}}}
	if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
