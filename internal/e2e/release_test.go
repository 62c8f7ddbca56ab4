//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// recorder keeps what a watch saw, for assertions about the order of events.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.events); n == 0 || r.events[n-1] != s {
		r.events = append(r.events, s)
	}
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// watchInto records every event of w through fn until ctx ends.
func watchInto(ctx context.Context, w watch.Interface, fn func(watch.Event)) {
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				fn(ev)
			}
		}
	}()
}

func waitState(t *testing.T, ctx context.Context, s *stack, id device.ID, timeout time.Duration, ok func(decide.DeviceState) bool) decide.DeviceState {
	t.Helper()
	var st decide.DeviceState
	eventually(t, timeout, "state of "+id.String(), func() error {
		var err error
		if st, err = stateOf(ctx, s, id); err != nil {
			return err
		}
		if !ok(st) {
			return fmt.Errorf("state %s, review %+v, last transition %v", st.State, st.Review, last(st))
		}
		return nil
	})
	return st
}

func last(st decide.DeviceState) any {
	if n := len(st.Transitions); n > 0 {
		return st.Transitions[n-1]
	}
	return nil
}

// TestReleasePath: Unhealthy -> quarantined; while the device is still broken its lease review's
// probe fails (quarantine kept, expiry extended, release refused); once fixed in the simulator the
// next review probes exactly that device, puts it on probation, runs the canary, waits the
// stability window and deletes the rule, closing the record.
func TestReleasePath(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, releaseClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "rel", 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	ns, node := "release", nodes[0]
	bad := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-2"}
	rule := bad.TaintRuleName()

	// What the cluster shows while it happens: the rule's taint keys, probe and canary Pods and
	// the devices their claims were allocated.
	var keys, pods, allocs recorder
	rw, err := kube.ResourceV1().DeviceTaintRules().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + rule})
	if err != nil {
		t.Fatal(err)
	}
	watchInto(ctx, rw, func(ev watch.Event) {
		if r, ok := ev.Object.(*resourcev1.DeviceTaintRule); ok {
			if ev.Type == watch.Deleted {
				keys.add("deleted")
			} else {
				keys.add(r.Spec.Taint.Key)
			}
		}
	})
	maxPods := 0
	for _, checkNS := range []string{policy.DefaultProbeNamespace, policy.DefaultCanaryNamespace} {
		if err := sim.EnsureNamespace(ctx, kube, checkNS); err != nil {
			t.Fatal(err)
		}
		pw, err := kube.CoreV1().Pods(checkNS).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live := map[string]bool{}
		var mu sync.Mutex
		watchInto(ctx, pw, func(ev watch.Event) {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if ev.Type == watch.Deleted {
				delete(live, p.Name)
			} else {
				live[p.Name] = true
				owner := "Pod"
				if len(p.OwnerReferences) > 0 {
					owner = p.OwnerReferences[0].Kind
				}
				pods.add(p.Labels[kubeobj.LabelRole] + " " + owner + " " + string(p.Status.Phase))
			}
			maxPods = max(maxPods, len(live))
		})
		cw, err := kube.ResourceV1().ResourceClaims(checkNS).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		watchInto(ctx, cw, func(ev watch.Event) {
			if c, ok := ev.Object.(*resourcev1.ResourceClaim); ok && c.Status.Allocation != nil {
				for _, r := range c.Status.Allocation.Devices.Results {
					allocs.add(c.Labels[kubeobj.LabelRole] + " " + r.Pool + "/" + r.Device)
				}
			}
		})
	}

	runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "trainer", Node: node, Index: ptr.To(2), Template: true, DeviceClass: releaseClass})
	if err := sim.SetFault(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, shared, bad, 30*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	// The job leaves the device (migration is another workflow's work), freeing it for probes.
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "trainer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	st := waitState(t, ctx, shared, bad, time.Minute, func(st decide.DeviceState) bool { return st.LastProbe != nil })
	if st.State != decide.Quarantined || st.LastProbe.Passed || !strings.Contains(st.LastProbe.Reason, "XID 79") {
		t.Fatalf("probe on a broken device: state %s, probe %+v", st.State, st.LastProbe)
	}
	if st.ReviewInterval.D() != 12*time.Second || st.Quarantine == nil {
		t.Fatalf("review interval %s after a failed probe, want 12s", st.ReviewInterval)
	}
	_, err = api.SendCommand(ctx, shared.temporal, bad, decide.Command{Kind: decide.CmdRelease, Actor: "alice"}, nil)
	if err == nil || !strings.Contains(err.Error(), "last probe failed") {
		t.Fatalf("release after a failed probe: %v", err)
	}
	r, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, rule, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := st.Quarantine.ExpiresAt.UTC().Format(time.RFC3339); r.Annotations[kubeobj.AnnotationExpiresAt] != want {
		t.Fatalf("rule expiry %s, want the extended %s", r.Annotations[kubeobj.AnnotationExpiresAt], want)
	}

	// The device is fixed; the next review passes.
	if err := sim.SetFault(ctx, kube, bad, corev1.ResourceHealthStatusHealthy, ""); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, ctx, shared, bad, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	if len(st.Closed) != 1 || st.Closed[0].ClosedBy != decide.Actor || !strings.Contains(st.Closed[0].CloseReason, "canary passed") {
		t.Fatalf("closed record %+v", st.Closed)
	}
	eventually(t, 10*time.Second, "rule gone", func() error {
		if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, rule, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("rule still there (%v)", err)
		}
		return nil
	})
	eventually(t, 10*time.Second, "probe and canary pods cleaned up", func() error {
		for _, checkNS := range []string{policy.DefaultProbeNamespace, policy.DefaultCanaryNamespace} {
			pl, err := kube.CoreV1().Pods(checkNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			cl, err := kube.ResourceV1().ResourceClaims(checkNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(pl.Items)+len(cl.Items) > 0 {
				return fmt.Errorf("%s: %d pods, %d claims left", checkNS, len(pl.Items), len(cl.Items))
			}
		}
		return nil
	})
	if got, want := strings.Join(keys.all(), ","), decide.TaintQuarantine+","+decide.TaintProbation+",deleted"; got != want {
		t.Fatalf("rule taint keys over time %s, want %s", got, want)
	}
	want := "probe " + node + "/gpu-2"
	for _, a := range allocs.all() {
		if !strings.HasSuffix(a, node+"/gpu-2") {
			t.Fatalf("a check Pod was allocated another device: %v", allocs.all())
		}
	}
	if got := allocs.all(); len(got) != 2 || got[0] != want || got[1] != "canary "+node+"/gpu-2" {
		t.Fatalf("check allocations %v, want probes then a canary, all on %s/gpu-2", got, node)
	}
	if maxPods > 1 {
		t.Fatalf("%d check pods at once", maxPods)
	}
	// The probe is a bare Pod; the canary runs as a Job, as workloads do.
	if got := strings.Join(pods.all(), ","); !strings.Contains(got, "probe Pod Failed") || !strings.Contains(got, "probe Pod Succeeded") ||
		!strings.Contains(got, "canary Job Succeeded") || strings.Contains(got, "canary Pod") {
		t.Fatalf("check pods over time: %s", got)
	}
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_release.json")
}

// TestRuleDeletedByHandThenUnhealthyAgain is the regression: a rule someone deletes is recorded
// as an operator release, and the device's next Unhealthy report creates a rule again.
func TestRuleDeletedByHandThenUnhealthyAgain(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := shared.kube
	nodes, err := sim.CreateNodes(ctx, kube, "byhand", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	ns, node := "byhand", nodes[0]
	bad := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-0"}
	runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "trainer", Node: node, Index: ptr.To(0), Template: true})
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
		t.Fatal(err)
	}
	var first *resourcev1.DeviceTaintRule
	eventually(t, 30*time.Second, "first rule", func() error {
		first, err = kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{})
		return err
	})
	if err := kube.ResourceV1().DeviceTaintRules().Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48 again"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a new rule after the report", func() error {
		r, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if r.UID == first.UID {
			return fmt.Errorf("still the first rule")
		}
		return nil
	})
	st := waitState(t, ctx, shared, bad, 10*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Quarantined && len(st.Closed) == 1 })
	if c := st.Closed[0]; !strings.Contains(c.CloseReason, "deleted outside DeviceWarden") || c.ClosedBy == "" {
		t.Fatalf("closed record %+v", c)
	}
	var released bool
	for _, tr := range st.Transitions {
		released = released || tr.To == decide.Released
	}
	if !released {
		t.Fatalf("no Released transition: %+v", st.Transitions)
	}
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_rule_deleted.json")
}

// TestOperatorCommands: force-quarantine of a device without a workflow starts one and taints it;
// a malformed extend signal (a payload that does not decode, as a typo in a CLI's JSON gives) is
// dropped and the workflow still acts on the next report.
func TestOperatorCommands(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := shared.kube
	nodes, err := sim.CreateNodes(ctx, kube, "ops", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	sdc := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-1"}
	res, err := api.SendCommand(ctx, shared.temporal, sdc, decide.Command{Kind: decide.CmdForceQuarantine, Actor: "alice", Reason: "silent data corruption"},
		&api.DeviceInput{Device: sdc, Policy: policy.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != decide.Quarantined {
		t.Fatalf("force-quarantine answered %+v", res)
	}
	r, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, sdc.TaintRuleName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Annotations[kubeobj.AnnotationActor] != "alice" {
		t.Fatalf("rule actor %q", r.Annotations[kubeobj.AnnotationActor])
	}
	if _, err := api.SendCommand(ctx, shared.temporal, sdc, decide.Command{Kind: decide.CmdForceQuarantine, Actor: "alice"}, nil); err == nil ||
		!strings.Contains(err.Error(), "already quarantined") {
		t.Fatalf("second force-quarantine: %v", err)
	}

	// A device suspected (Unknown) gets a malformed extend, then an Unhealthy report.
	ns, node := "ops", nodes[0]
	dev := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-0"}
	runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "trainer", Node: node, Index: ptr.To(0), Template: true})
	if _, err := sim.SetHealth(ctx, kube, dev, corev1.ResourceHealthStatusUnknown, "driver restarting"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, shared, dev, 30*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Suspect })
	if err := shared.temporal.SignalWorkflow(ctx, dev.WorkflowID(), "", api.SignalExtend, map[string]any{"actor": "bob", "duration": []int{1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, dev, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "rule after the malformed signal", func() error {
		_, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, dev.TaintRuleName(), metav1.GetOptions{})
		return err
	})
	st := waitState(t, ctx, shared, dev, 10*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	if st.Dropped != 1 || !strings.Contains(st.LastDropped, "does not decode") {
		t.Fatalf("dropped %d %q", st.Dropped, st.LastDropped)
	}
	recordHistory(t, ctx, shared.temporal, dev.WorkflowID(), "device_malformed_signal.json")
	// Extend, then query: the update's answer and the rule's expiry agree.
	res, err = api.SendCommand(ctx, shared.temporal, dev, decide.Command{Kind: decide.CmdExtend, Actor: "bob", Duration: policy.JSONDuration(48 * time.Hour)}, nil)
	if err != nil || res.State != decide.Quarantined || !strings.Contains(res.Message, "extended by 48h0m0s") {
		t.Fatalf("extend: %+v %v", res, err)
	}
	recordHistory(t, ctx, shared.temporal, sdc.WorkflowID(), "device_force.json")
}

// faultAndQuarantine gives id a fault of kind (the simulator's fault state) that its health
// reports with message, and waits for the device's quarantine.
func faultAndQuarantine(t *testing.T, ctx context.Context, s *stack, id device.ID, message, kind string) {
	t.Helper()
	if err := sim.SetFaultKind(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, message, kind); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, message); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, s, id, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
}
