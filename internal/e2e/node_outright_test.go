//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// outrightClass devices climb a ladder whose node step's object the apiserver refuses (its
// template gives spec.nodeName a number): every attempt of the step fails.
const outrightClass = "outright.gpu.sim.devicewarden.io"

// A node step whose every attempt fails (here: the remediator's object is refused) leaves nothing
// on the node: no object, and the node's permit back in the breaker, so the pool's next reboot is
// not refused for the permit's hold (#52). It did not run: no verdict on the device, so the try is
// taken back and taken again later, and the device is not retired for it.
func TestNodeStepThatFailsOutrightLeavesNothing(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, outrightClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "rep-outright", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	bad := quarantinedThenIdle(t, ctx, "rep-outright", nodes[0], outrightClass)
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.NotRun != nil })
	tries := st.Quarantine.Ladder.Tries
	if st.State != decide.Quarantined || st.NotRun.Kind != decide.ActRepair || !strings.Contains(st.NotRun.Reason, "node step could not run") ||
		len(tries) != 1 || tries[0].Kind != "reset" {
		t.Fatalf("state %s, not run %+v, tries %+v", st.State, st.NotRun, tries)
	}
	var br breaker.State
	if err := queryInto(ctx, shared.temporal, api.BreakerWorkflowID, &br); err != nil {
		t.Fatal(err)
	}
	for _, g := range br.Grants {
		if g.Device == "node:"+nodes[0] {
			t.Fatalf("the node's permit is still held until %s", g.Until)
		}
	}
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_repair_node_outright_v18.json") // device_repair_node_outright.json: the run before decide.Rules.NotRunRetries
}

// quarantinedThenIdle runs a Pod on gpu-0 of node, gives that device a fault only a reboot clears,
// waits for its quarantine and deletes the Pod (its owner moves the workload away).
func quarantinedThenIdle(t *testing.T, ctx context.Context, ns, node, class string) device.ID {
	t.Helper()
	kube := shared.kube
	bad := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-0"}
	pod := runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "trainer", Node: node, Index: ptr.To(0), DeviceClass: class})
	faultAndQuarantine(t, ctx, shared, bad, "GPU has fallen off the bus (no XID given)", sim.FaultReboot)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	return bad
}
