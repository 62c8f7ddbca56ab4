//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// causeClass devices climb a ladder of a reset and then a node step that nobody approves and
// that waits for the node's other holders; which step a fault starts at is its cause's choice.
const (
	causeClass = "cause.gpu.sim.devicewarden.io"
	proofClass = "proof.gpu.sim.devicewarden.io"
)

// An application's own fault (XID 13 in kubelet's status of the Pod, in the kernel's words)
// fences nothing: no DeviceTaintRule, the device stays in service, the tenant's Pod gets an Event
// that says so, and the device's record counts the fault.
func TestAnApplicationFaultFencesNothing(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, causeClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "app-fault", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	pod := runningPod(t, ctx, kube, sim.Workload{Namespace: "app-fault", Name: "tenant", Node: nodes[0], Index: ptr.To(0), DeviceClass: causeClass})
	id := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	if _, err := sim.SetHealth(ctx, kube, id, corev1.ResourceHealthStatusUnhealthy, "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Engine Exception"); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, shared, id, time.Minute, func(st decide.DeviceState) bool { return st.AppFaultsTotal == 1 })
	if st.State != decide.Healthy || st.Quarantine != nil || st.Cause == nil || st.Cause.XID != 13 || st.Cause.PCI != "0000:3b:00" {
		t.Fatalf("state %s, quarantine %+v, cause %+v", st.State, st.Quarantine, st.Cause)
	}
	eventually(t, 30*time.Second, "the tenant's Pod told", func() error {
		evs, err := kube.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod.Name + ",reason=DeviceApplicationFault"})
		if err != nil {
			return err
		}
		if len(evs.Items) != 1 || !strings.Contains(evs.Items[0].Message, "stays in service") {
			return fmt.Errorf("events %+v", evs.Items)
		}
		return nil
	})
	if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the device was fenced (%v)", err)
	}
	recordHistory(t, ctx, shared.temporal, id.WorkflowID(), "device_app_fault_v13.json")
}

// The cause chooses the first step, on the real stack: an XID 79 goes straight to the node step
// (no reset runs), a recovery action of GPU reset on an XID the table calls reboot-first takes
// the reset, and a row-remap failure is retired at once, without a reset.
func TestTheCauseChoosesTheFirstStepOnTheStack(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, causeClass); err != nil {
		t.Fatal(err)
	}
	reports, err := app.ReportsClient(shared.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		kind      string
		cause     map[string]any // a report's cause; nil: kubelet's status says the XID
		first     policy.RepairKind
		retired   bool
		recording string
	}{
		{name: "xid-79", kind: sim.FaultReboot, first: policy.RepairNode, recording: "device_cause_node_first_v13.json"},
		{name: "recovery", kind: sim.FaultTransient, cause: map[string]any{"code": "xid:79", "recoveryAction": "gpu-reset"}, first: policy.RepairReset},
		{name: "row-remap", kind: sim.FaultTransient, cause: map[string]any{"code": "row-remap-failure"}, retired: true, recording: "device_cause_retire_v13.json"},
	}
	ids := make([]device.ID, len(cases))
	pods := make([]*corev1.Pod, len(cases))
	for i, c := range cases {
		nodes, err := sim.CreateNodes(ctx, kube, "cause-"+c.name, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = runningPod(t, ctx, kube, sim.Workload{Namespace: "causes", Name: c.name, Node: nodes[0], Index: ptr.To(0), DeviceClass: causeClass})
		ids[i] = device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
		if err := sim.SetFaultKind(ctx, kube, ids[i], corev1.ResourceHealthStatusUnhealthy, "XID 79: fell off the bus", c.kind); err != nil {
			t.Fatal(err)
		}
		if c.cause == nil {
			if _, err := sim.SetHealth(ctx, kube, ids[i], corev1.ResourceHealthStatusUnhealthy, "XID 79: fell off the bus"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		report := &unstructured.Unstructured{Object: map[string]any{"apiVersion": healthreport.Group + "/" + healthreport.Version, "kind": healthreport.Kind,
			"metadata": map[string]any{"name": "cause-" + c.name},
			"spec": map[string]any{"node": nodes[0], "attribute": map[string]any{"name": "uuid", "value": sim.UUID(ids[i])}, "health": "Unhealthy",
				"cause": c.cause, "source": "dcgm"}}}
		if _, err := reports.Create(ctx, report, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cases {
		st := waitState(t, ctx, shared, ids[i], time.Minute, func(st decide.DeviceState) bool { return st.Quarantine != nil })
		if st.Quarantine.Choice == nil {
			t.Fatalf("%s: the quarantine keeps no choice: %+v", c.name, st.Quarantine)
		}
		t.Logf("%s: %s", c.name, st.Quarantine.Reason)
		if c.retired {
			continue // retired while its Pod still holds it: no step was needed
		}
		// The ladder waits for the Pod that holds the device.
		if err := kube.CoreV1().Pods(pods[i].Namespace).Delete(ctx, pods[i].Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cases {
		if c.retired {
			st := waitState(t, ctx, shared, ids[i], time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Retired })
			if l := st.Quarantine.Ladder; l == nil || len(l.Tries) != 0 || !strings.Contains(st.Transitions[len(st.Transitions)-1].Reason, "needs a replacement") {
				t.Fatalf("%s: ladder %+v, last %+v", c.name, l, st.Transitions[len(st.Transitions)-1])
			}
		} else {
			st := waitState(t, ctx, shared, ids[i], 3*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
			l := st.Closed[len(st.Closed)-1].Ladder
			if l == nil || len(l.Tries) != 1 || l.Tries[0].Kind != c.first || !l.Tries[0].Result.Passed {
				t.Fatalf("%s: ladder %+v, want one passed %s step", c.name, l, c.first)
			}
		}
		if c.recording != "" {
			recordHistory(t, ctx, shared.temporal, ids[i].WorkflowID(), c.recording)
		}
	}
}
