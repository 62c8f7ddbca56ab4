//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// A fault only a reboot clears: the reset fails, the node step waits for a person's approval, then
// asks the simulator's remediator for a reboot (a NodeReboot); the node's boot ID changes, and the
// probe and canary that follow release the device.
func TestRebootFaultIsClearedByTheNodeStep(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, rebootClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "rep-reboot", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bootBefore := node.Status.NodeInfo.BootID
	if bootBefore == "" {
		t.Fatal("a simulated node has no boot ID")
	}
	// Its owner moves the workload away; the ladder starts once the device is idle.
	bad := quarantinedThenIdle(t, ctx, "rep-reboot", nodes[0], rebootClass)
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { id, _ := st.StepApproval(); return id != "" })
	id, step := st.StepApproval()
	if l := st.Quarantine.Ladder; step != string(policy.RepairNode) || len(l.Tries) != 1 || l.Tries[0].Result == nil || l.Tries[0].Result.Passed {
		t.Fatalf("waits for %s after %+v", step, l)
	}
	if n, err := kube.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{}); err != nil || n.Status.NodeInfo.BootID != bootBefore {
		t.Fatalf("the node rebooted before anyone approved: %v", err)
	}
	if _, err := api.SendCommand(ctx, shared.temporal, bad, decide.Command{Kind: decide.CmdApprove, Actor: "sre@example.com", Review: id}, nil); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	l := q.Ladder
	if l == nil || len(l.Tries) != 2 || l.Tries[0].Kind != policy.RepairReset || l.Tries[0].Result.Passed ||
		l.Tries[1].Kind != policy.RepairNode || !l.Tries[1].Result.Passed || l.Tries[1].Review != "passed: released" || l.ApprovedBy != "sre@example.com" {
		t.Fatalf("ladder %+v", l)
	}
	if !strings.Contains(l.Tries[1].Result.Reason, "booted again") {
		t.Fatalf("node step: %s", l.Tries[1].Result.Reason)
	}
	node, err = kube.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Status.NodeInfo.BootID == bootBefore {
		t.Fatalf("released, but node %s never rebooted (boot ID %s)", nodes[0], bootBefore)
	}
	// The remediator's object is gone once the node booted again.
	objs, err := kubeobj.Dynamic(kube)
	if err != nil {
		t.Fatal(err)
	}
	list, err := objs.Resource(sim.RebootGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Items {
		if name, _, _ := unstructured.NestedString(o.Object, "spec", "nodeName"); name == nodes[0] {
			t.Fatalf("%s left behind", o.GetName())
		}
	}
	if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("rule after release: %v", err)
	}
	// Each try is an Event on the node: the reset that failed, the reboot that passed.
	eventually(t, 30*time.Second, "repair Events on "+nodes[0], func() error {
		evs, err := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + nodes[0] + ",reason=" + kubeobj.EventRepairTry})
		if err != nil {
			return err
		}
		var got []string
		for _, e := range evs.Items {
			got = append(got, e.Type+": "+e.Message)
		}
		slices.Sort(got)
		if len(got) != 2 || !strings.HasPrefix(got[0], "Normal: repair step node (try 2)") || !strings.HasPrefix(got[1], "Warning: repair step reset (try 1)") {
			return fmt.Errorf("events %q", got)
		}
		return nil
	})
	t.Logf("time to repair (quarantined to released): %s; node step: %s", q.ClosedAt.Sub(q.CreatedAt), l.Tries[1].Result.Reason)
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_repair_reboot_v11.json") // device_repair_reboot.json is the run before decide.Rules.StepReports
}
