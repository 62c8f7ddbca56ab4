//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// faultOnJob starts a checkpointing Job on a node of two repairClass GPUs and gives its device a
// fault of the kind, reported Unhealthy by the Job's Pod.
func faultOnJob(t *testing.T, ctx context.Context, name, kind string) (device.ID, sim.Workload) {
	t.Helper()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, repairClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, name, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	w := sim.Workload{Namespace: name, Name: "train", Node: nodes[0], DeviceClass: repairClass}
	_, ids := runningJob(t, ctx, w, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: time.Second})
	bad := ids[0]
	if err := sim.SetFaultKind(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48", kind); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
		t.Fatal(err)
	}
	return bad, w
}

// A transient fault: the Job is moved, the idle device is reset by the driver's tool, probed,
// canaried and released, with no person involved.
func TestTransientFaultIsResetAndReleased(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bad, w := faultOnJob(t, ctx, "rep-transient", sim.FaultTransient)
	mid := migrationOf(t, ctx, bad)
	if st := migrationResult(t, ctx, mid); st.Outcome != migrationplan.OutcomeMigrated {
		t.Fatalf("migration %+v", st)
	}
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	if q.Ladder == nil || len(q.Ladder.Tries) != 1 || q.Ladder.Tries[0].Review != "passed: released" || !q.Ladder.Tries[0].Result.Passed {
		t.Fatalf("ladder %+v", q.Ladder)
	}
	if _, err := shared.kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("rule after release: %v", err)
	}
	if f, stands, err := sim.FaultOf(ctx, shared.kube, bad); stands || err != nil {
		t.Fatalf("the reset left the fault: %+v (%v)", f, err)
	}
	for _, tr := range st.Transitions {
		if strings.Contains(tr.Actor, "@") || (tr.Actor != decide.Actor && tr.Actor != "") {
			t.Fatalf("a person acted: %+v", tr)
		}
	}
	t.Logf("time to repair (quarantined to released): %s; job %s/%s moved by %s", q.ClosedAt.Sub(q.CreatedAt), w.Namespace, w.Name, mid)
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_repair_transient_v11.json") // device_repair_transient.json is the run before decide.Rules.StepReports
}

// A permanent fault: both resets fail, and the device is Retired with its evidence bundle and
// Event; its rule stays.
func TestPermanentFaultRetiresTheDevice(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bad, _ := faultOnJob(t, ctx, "rep-permanent", sim.FaultPermanent)
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Retired })
	if l := st.Quarantine.Ladder; l == nil || len(l.Tries) != 2 || l.Tries[1].Result == nil || l.Tries[1].Result.Passed {
		t.Fatalf("ladder %+v", l)
	}
	if st.Review != nil || !st.NextDeadline().IsZero() {
		t.Fatalf("a retired device waits for a review: %+v", st.Review)
	}
	name := kubeobj.RetiredName(bad)
	var cm *corev1.ConfigMap
	eventually(t, 30*time.Second, "evidence "+name, func() error {
		var err error
		cm, err = shared.kube.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if !strings.Contains(cm.Data["try-02"], "reset attempt 2: passed=false") || cm.Data["device"] != bad.String() {
		t.Fatalf("evidence %v", cm.Data)
	}
	eventually(t, 30*time.Second, "DeviceRetired event", func() error {
		evs, err := shared.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=DeviceRetired"})
		if err != nil {
			return err
		}
		if len(evs.Items) == 0 {
			return fmt.Errorf("no event yet")
		}
		return nil
	})
	if _, err := shared.kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("a retired device's rule: %v", err)
	}
	// The stock temporal CLI lists the devices to replace, as docs/operating.md says.
	eventually(t, 30*time.Second, "temporal workflow list of retired devices", func() error {
		out, err := temporalCLI(t, ctx, "workflow", "list", "--query", "DeviceState = 'Retired'")
		if err != nil || !strings.Contains(out, bad.WorkflowID()) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_repair_retired.json")
}

// A partitionable GPU is reset as one physical unit, once, and only after every form is idle: a
// Pod on a sibling partition that never reported holds the reset back as the reporter's does.
func TestPartitionedGPUIsResetOnceEveryFormIsIdle(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, unitRepairClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreatePartitionedNodes(ctx, kube, "rep-unit", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	ns, node := "rep-unit", nodes[0]
	unit := device.ID{Driver: sim.Driver, Pool: node, Device: device.CounterSetsKey + sim.CounterSetName(0)}
	if err := sim.EnsureNamespace(ctx, kube, policy.DefaultResetNamespace); err != nil {
		t.Fatal(err)
	}
	// What every reset on this node was allocated.
	var resets recorder
	cw, err := kube.ResourceV1().ResourceClaims(policy.DefaultResetNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: kubeobj.LabelRole + "=" + string(decide.ActRepair)})
	if err != nil {
		t.Fatal(err)
	}
	watchInto(ctx, cw, func(ev watch.Event) {
		if c, ok := ev.Object.(*resourcev1.ResourceClaim); ok && c.Status.Allocation != nil {
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Pool == node {
					resets.add(string(c.UID) + " " + r.Device)
				}
			}
		}
	})
	part := func(name string, gpu int, profile string) sim.Workload {
		return sim.Workload{Namespace: ns, Name: name, Node: node, Index: ptr.To(gpu), Profile: profile, DeviceClass: unitRepairClass, Template: true}
	}
	holders := map[string]device.ID{}
	for _, w := range []sim.Workload{part("small-0", 0, "1g.10gb"), part("large-0", 0, "3g.40gb"), part("small-1", 1, "1g.10gb")} {
		p := runningPod(t, ctx, kube, w)
		if holders[w.Name], err = podDevice(ctx, kube, *p); err != nil {
			t.Fatal(err)
		}
	}
	bad := holders["small-0"]
	if err := sim.SetFaultKind(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48", sim.FaultTransient); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, shared, unit, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	// The reporter leaves; large-0, silent on a sibling form, still runs on the GPU.
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "small-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, shared, unit, 30*time.Second, func(st decide.DeviceState) bool {
		return len(st.Reporters) == 1 && st.Reporters[0].Pod == "large-0"
	})
	time.Sleep(3 * time.Second)
	if got := resets.all(); len(got) != 0 || st.Quarantine.Ladder == nil || len(st.Quarantine.Ladder.Tries) != 0 {
		t.Fatalf("reset while large-0 held a form: %v", got)
	}
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "large-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, ctx, shared, unit, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	got := resets.all()
	if len(got) != 1 || !strings.HasSuffix(got[0], " gpu-0") {
		t.Fatalf("resets on %s: %v, want one of the whole gpu-0", node, got)
	}
	if tries := st.Closed[len(st.Closed)-1].Ladder.Tries; len(tries) != 1 || tries[0].Review != "passed: released" {
		t.Fatalf("tries %+v", tries)
	}
	if p, err := kube.CoreV1().Pods(ns).Get(ctx, "small-1", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("gpu-1's Pod: %v", err)
	}
}

// A holder that leaves after the fence (its Pod deleted, its standalone claim left for the claim
// controller to release; another Pod keeps the node's other device) is seen idle at once: the reset does not put itself off for a minute
// because the claim was still allocated for a moment after its Pod was gone (#52, idle seen late).
func TestResetStartsAsTheHolderLeaves(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, repairClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "rep-idle", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	bad := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	w := sim.Workload{Namespace: "rep-idle", Name: "infer", Node: nodes[0], Index: ptr.To(0), DeviceClass: repairClass}
	runningPod(t, ctx, kube, w)
	// Another Pod keeps the node's other device the whole time.
	runningPod(t, ctx, kube, sim.Workload{Namespace: "rep-idle", Name: "other", Node: nodes[0], Index: ptr.To(1), DeviceClass: repairClass})
	faultAndQuarantine(t, ctx, shared, bad, "XID 48", sim.FaultTransient)
	left := time.Now()
	if err := kube.CoreV1().Pods(w.Namespace).Delete(ctx, w.Name, metav1.DeleteOptions{}); err != nil { // as kubectl delete does
		t.Fatal(err)
	}
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	for _, tr := range st.Transitions {
		if strings.Contains(tr.Reason, "repair waits") {
			t.Fatalf("the reset put itself off after the holder left: %s", tr.Reason)
		}
	}
	t.Logf("holder deleted -> released in %s", time.Since(left).Round(10*time.Millisecond))
}
