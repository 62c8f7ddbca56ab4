//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// diagClass devices climb a reset and then a node step with a node check across the node, and
// their review's probe is a diagnostic per path: one after a reset, another after a node step.
const diagClass = "diag.gpu.sim.devicewarden.io"

// The images of diagClass's checks (the simulator's kubelet answers every check from the fault
// state of its devices, whatever its image).
const (
	diagAfterReset = "diag.sim.devicewarden.io/dcgm-diag:r2"
	diagAfterNode  = "diag.sim.devicewarden.io/dcgm-diag:r3"
	diagAllReduce  = "diag.sim.devicewarden.io/nccl-tests:all-reduce"
)

const diagPolicy = `
  - name: diag-test
    match: {deviceClass: ` + diagClass + `}
    stabilityWindow: 0s
    notRunAlertAfter: 1
    notRunRetry: 5s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    probeAfter:
      reset: {image: ` + diagAfterReset + `, command: [dcgmi, diag, -r, "2"]}
      node: {image: ` + diagAfterNode + `, command: [dcgmi, diag, -r, "3"]}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
        - kind: node
          timeout: 1m
          nodeCheck: {image: ` + diagAllReduce + `, command: [all_reduce_perf, -b, 8M, -e, 1G], timeout: 30s}
          template: {apiVersion: ` + sim.RebootGroup + `/` + sim.RebootVersion + `, kind: ` + sim.RebootKind + `, spec: {nodeName: "{{ .Node }}"}}`

// checkImages are the images of the probes a device's workflow ran, in order.
func checkImages(t *testing.T, ctx context.Context, id device.ID, kind decide.ActionKind) []string {
	t.Helper()
	var out []string
	for _, in := range activityInputs(t, ctx, shared.temporal, id.WorkflowID(), "RunCheck") {
		if !strings.Contains(in, `"kind":"`+string(kind)+`"`) {
			continue
		}
		for _, img := range []string{diagAfterReset, diagAfterNode, policy.DefaultCheckImage} {
			if strings.Contains(in, `"image":"`+img+`"`) {
				out = append(out, img)
			}
		}
	}
	return out
}

// A fault a reset clears: the review after the reset probes with the reset's diagnostic.
func TestTheReviewAfterAResetRunsTheResetsDiagnostic(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, diagClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "diag-reset", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	bad := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	pod := runningPod(t, ctx, kube, sim.Workload{Namespace: "diag-reset", Name: "trainer", Node: nodes[0], Index: ptr.To(0), DeviceClass: diagClass})
	faultAndQuarantine(t, ctx, shared, bad, "XID 48: double-bit ECC error", sim.FaultTransient)
	if err := kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	l := st.Closed[len(st.Closed)-1].Ladder
	if l == nil || len(l.Tries) != 1 || l.Tries[0].Kind != policy.RepairReset || !l.Tries[0].Result.Passed {
		t.Fatalf("ladder %+v", l)
	}
	if got := checkImages(t, ctx, bad, decide.ActProbe); len(got) != 1 || got[0] != diagAfterReset {
		t.Fatalf("the review after the reset probed with %v, want [%s]", got, diagAfterReset)
	}
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_probe_after_reset.json")
}

// A fault only a reboot clears, and a node check across the node whose image the node cannot
// pull at first: the node reboots once, the check does not run (a person is told, the ladder
// does not move, the node's devices stay fenced), and once the image pulls the try taken again
// runs only the check, with no second reboot; the review after it probes with the node's
// diagnostic and releases the device.
func TestANodeCheckThatDidNotRunRebootsTheNodeOnce(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, diagClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "diag-node", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	if err := sim.SetUnpullable(ctx, kube, node, diagAllReduce); err != nil {
		t.Fatal(err)
	}
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bootBefore := n.Status.NodeInfo.BootID
	bad := quarantinedThenIdle(t, ctx, "diag-node", node, diagClass)
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool {
		return st.NotRun != nil && st.NotRun.Kind == decide.ActRepair
	})
	if !strings.Contains(st.NotRun.Reason, "booted again") || !strings.Contains(st.NotRun.Reason, "node check did not run") ||
		!strings.Contains(st.NotRun.Reason, "ImagePullBackOff") || st.State != decide.Quarantined {
		t.Fatalf("state %s, not run %+v", st.State, st.NotRun)
	}
	if l := st.Quarantine.Ladder; len(l.Tries) != 1 || l.Tries[0].Kind != policy.RepairReset {
		t.Fatalf("the ladder moved on a node check that did not run: %+v", l)
	}
	n, err = kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil || n.Status.NodeInfo.BootID == bootBefore {
		t.Fatalf("the node did not reboot before its check (%v)", err)
	}
	bootAfter := n.Status.NodeInfo.BootID
	if texts := activityInputs(t, ctx, shared.temporal, bad.WorkflowID(), "Alert"); !anyContains(texts, "repair of "+bad.String()+" did not run, 1 in a row") {
		t.Fatalf("no person was told the node check did not run: %v", texts)
	}
	// The node's devices stay fenced until the check has run.
	rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(node)})
	if err != nil {
		t.Fatal(err)
	}
	fenced := false
	for _, r := range rules.Items {
		fenced = fenced || r.Spec.Taint.Key == kubeobj.TaintNodeRepair
	}
	if !fenced {
		t.Fatalf("the node's devices went back before its node check ran: %d rules", len(rules.Items))
	}
	if err := sim.SetUnpullable(ctx, kube, node); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	l := st.Closed[len(st.Closed)-1].Ladder
	if len(l.Tries) != 2 || l.Tries[1].Kind != policy.RepairNode || !l.Tries[1].Result.Passed || !strings.Contains(l.Tries[1].Result.Reason, "node check passed") {
		t.Fatalf("ladder %+v", l)
	}
	if n, err = kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil || n.Status.NodeInfo.BootID != bootAfter {
		t.Fatalf("the node rebooted again for a check that did not run (%v)", err)
	}
	if got := checkImages(t, ctx, bad, decide.ActProbe); len(got) != 1 || got[0] != diagAfterNode {
		t.Fatalf("the review after the node step probed with %v, want [%s]", got, diagAfterNode)
	}
	eventually(t, 30*time.Second, "the node's fences gone", func() error {
		rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(node)})
		if err != nil || len(rules.Items) > 0 {
			return fmt.Errorf("%d rules (%v)", len(rules.Items), err)
		}
		return nil
	})
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_node_check_not_run.json")
}
