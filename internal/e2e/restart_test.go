//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/api/workflowservice/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// devicePods runs one pod per device on fresh nodes and returns the devices.
func devicePods(t *testing.T, ctx context.Context, kube kubernetes.Interface, prefix string, n int) []device.ID {
	t.Helper()
	nodes, err := sim.CreateNodes(ctx, kube, prefix, (n+7)/8, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.EnsureNamespace(ctx, kube, prefix); err != nil {
		t.Fatal(err)
	}
	var ids []device.ID
	for i := 0; i < n; i++ {
		node, idx := nodes[i/8], i%8
		if _, err := (sim.Workload{Namespace: prefix, Name: fmt.Sprintf("job-%d", i), Node: node, Index: ptr.To(idx)}).Create(ctx, kube); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, device.ID{Driver: sim.Driver, Pool: node, Device: fmt.Sprintf("gpu-%d", idx)})
	}
	eventually(t, 2*time.Minute, "pods running", func() error {
		pods, err := kube.CoreV1().Pods(prefix).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) > 0 {
				running++
			}
		}
		if running != n {
			return fmt.Errorf("%d of %d running", running, n)
		}
		return nil
	})
	return ids
}

func setHealth(t *testing.T, ctx context.Context, kube kubernetes.Interface, ids []device.ID, h corev1.ResourceHealthStatus) {
	t.Helper()
	for _, id := range ids {
		if _, err := sim.SetHealth(ctx, kube, id, h, ""); err != nil {
			t.Fatal(err)
		}
	}
}

func stateOf(ctx context.Context, s *stack, id device.ID) (decide.DeviceState, error) {
	var st decide.DeviceState
	return st, queryInto(ctx, s.temporal, id.WorkflowID(), &st)
}

func runs(ctx context.Context, s *stack, id device.ID) (int64, error) {
	resp, err := s.temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: fmt.Sprintf("WorkflowId = %q", id.WorkflowID())})
	return resp.GetCount(), err
}

// TestRestartMidStorm SIGKILLs the controller process while a storm of Unknown and Unhealthy
// reports is in flight, changes more devices while it is dead, starts a new process, and checks
// exactly-once from both sides: each device has one workflow run with exactly the transitions its
// reports call for, and the apiserver's audit log shows each rule created once and none deleted.
func TestRestartMidStorm(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, dir := ownInfra(t, ctx)
	ids := devicePods(t, ctx, s.kube, "restart", 24)
	first := startChild(t, s, dir, "controller-1")
	// Wait for the first process to be at work: its breaker configuration reached Temporal.
	eventually(t, time.Minute, "first controller running", func() error {
		br, err := breakerState(ctx, s.temporal)
		if err == nil && br.ConfiguredBy == "" {
			err = fmt.Errorf("breaker not configured")
		}
		return err
	})

	// 12 Unknown and 6 Unhealthy reports at once; the process dies as the first rule appears.
	wait := stormToFirstRule(t, ctx, s.kube, ids[:18], 12)
	first.kill(t)
	wait()
	started := 0
	for _, id := range ids[:18] {
		if _, err := s.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), ""); err == nil {
			started++
		}
	}
	t.Logf("killed with %d of 18 workflows started and %d of 6 rules created", started, ruled(ctx, s.kube, ids[12:18]))

	setHealth(t, ctx, s.kube, ids[18:], corev1.ResourceHealthStatusUnknown) // missed while dead
	setHealth(t, ctx, s.kube, ids[:4], corev1.ResourceHealthStatusHealthy)  // recovered while dead
	startChild(t, s, dir, "controller-2")

	// A device Healthy again before the second process started: if its Unknown report was taken,
	// it is Healthy with two transitions; if the report died with its sender, there is no workflow,
	// or one (started by that report) that never saw it: Healthy with none. Never one or three.
	eventually(t, 90*time.Second, "every device decided after the restart", func() error {
		for i, id := range ids {
			st, err := stateOf(ctx, s, id)
			if i < 4 && err != nil && strings.Contains(err.Error(), "not found") {
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			want, transitions := decide.Suspect, 1
			switch {
			case i < 4:
				want, transitions = decide.Healthy, 2
			case i >= 12 && i < 18:
				want = decide.Quarantined
			}
			if i < 4 && st.State == decide.Healthy && len(st.Transitions) == 0 {
				continue
			}
			if st.State != want || len(st.Transitions) != transitions {
				return fmt.Errorf("%s: state %s with %d transitions, want %s with %d", id, st.State, len(st.Transitions), want, transitions)
			}
		}
		return nil
	})
	for i, id := range ids {
		n, err := runs(ctx, s, id)
		if err != nil || n > 1 || (i >= 4 && n != 1) {
			t.Fatalf("%s: %d workflow runs (%v), want 1", id, n, err)
		}
	}
	expectCreatedOnce(t, s, ruleNames(ids[12:18]))
}

// TestLeaderElection runs two replicas: only the Lease holder watches; when it stops, the other
// takes over.
func TestLeaderElection(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, stopInfra, err := startInfra(ctx, t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	opts := func(id string) app.ControllerOptions {
		// The default breaker allows 10% of 16 devices (one action); this test is about leadership.
		return app.ControllerOptions{Workers: 4, Breaker: breaker.Config{Window: time.Minute, MaxCount: 100}, LeaderElection: &app.LeaderElection{Namespace: "default", Name: "devicewarden-watcher",
			Identity: id, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}}
	}
	holder := func() string {
		l, err := s.kube.CoordinationV1().Leases("default").Get(ctx, "devicewarden-watcher", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	mA, stopA := s.controller(opts("replica-a"))
	eventually(t, 30*time.Second, "replica-a leads", func() error {
		if h := holder(); h != "replica-a" {
			return fmt.Errorf("holder %q", h)
		}
		return nil
	})
	mB, stopB := s.controller(opts("replica-b"))
	defer stopB()
	ids := devicePods(t, ctx, s.kube, "leader", 2)

	setHealth(t, ctx, s.kube, ids[:1], corev1.ResourceHealthStatusUnhealthy)
	eventually(t, 30*time.Second, "first device quarantined", func() error {
		_, err := s.kube.ResourceV1().DeviceTaintRules().Get(ctx, ids[0].TaintRuleName(), metav1.GetOptions{})
		return err
	})
	// The watcher counts a signal once Temporal has answered it, which can be after the workflow
	// has already quarantined the device.
	eventually(t, 10*time.Second, "the leader's signal counted", func() error {
		if ok := testutil.ToFloat64(mA.Signals.WithLabelValues("ok")); ok < 1 {
			return fmt.Errorf("leader signalled %v times", ok)
		}
		return nil
	})
	if events := testutil.CollectAndCount(mB.WatcherEvents); events != 0 {
		t.Fatalf("the follower watched: %d event series", events)
	}
	if a, b := testutil.ToFloat64(mA.Leading), testutil.ToFloat64(mB.Leading); a != 1 || b != 0 {
		t.Fatalf("devicewarden_watcher_leading: leader %v, follower %v", a, b)
	}

	stopA()
	eventually(t, 30*time.Second, "replica-b takes over", func() error {
		if h := holder(); h != "replica-b" {
			return fmt.Errorf("holder %q", h)
		}
		return nil
	})
	setHealth(t, ctx, s.kube, ids[1:], corev1.ResourceHealthStatusUnhealthy)
	eventually(t, 30*time.Second, "second device quarantined by the new leader", func() error {
		_, err := s.kube.ResourceV1().DeviceTaintRules().Get(ctx, ids[1].TaintRuleName(), metav1.GetOptions{})
		return err
	})
	eventually(t, 10*time.Second, "the new leader's signal counted", func() error {
		if ok := testutil.ToFloat64(mB.Signals.WithLabelValues("ok")); ok < 1 {
			return fmt.Errorf("new leader signalled %v times", ok)
		}
		return nil
	})
	if a, b := testutil.ToFloat64(mA.Leading), testutil.ToFloat64(mB.Leading); a != 0 || b != 1 {
		t.Fatalf("devicewarden_watcher_leading after the takeover: old leader %v, new %v", a, b)
	}
}

// TestRestartWhileDeviceMissing: a device leaves its slice while allocated (Suspect, tolerance
// running); the controller restarts. The new watcher re-sends what is true from the state it
// lists, so the device stays Suspect with the same tolerance deadline: it is not turned Healthy
// and its window is not restarted.
func TestRestartWhileDeviceMissing(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, stopInfra, err := startInfra(ctx, t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	_, stop1 := s.controller(app.ControllerOptions{Workers: 4})
	id := devicePods(t, ctx, s.kube, "failover", 1)[0]
	unpublish(t, ctx, s.kube, id)
	settled(t, ctx, s, id, decide.Suspect)
	before, err := stateOf(ctx, s, id)
	if err != nil {
		t.Fatal(err)
	}
	stop1()
	_, stop2 := s.controller(app.ControllerOptions{Workers: 4})
	defer stop2()
	stillSuspect(t, ctx, s, id, before, "the restart")
}

// stillSuspect waits until a new watcher (a restart, a new leader) has re-sent the device's state
// once, under its own newer sequence, and checks that the device stayed Suspect with the same
// tolerance window and no new transition.
func stillSuspect(t *testing.T, ctx context.Context, s *stack, id device.ID, before decide.DeviceState, after string) {
	t.Helper()
	var st decide.DeviceState
	eventually(t, 30*time.Second, "the new watcher's report heard after "+after, func() error {
		var err error
		if st, err = stateOf(ctx, s, id); err != nil {
			return err
		}
		if st.Seq == nil || before.Seq == nil || st.Seq.Term == before.Seq.Term {
			return fmt.Errorf("no report from the new watcher yet")
		}
		return nil
	})
	if st.State != decide.Suspect || !st.ToleranceUntil.Equal(before.ToleranceUntil) || len(st.Transitions) != len(before.Transitions) {
		t.Fatalf("after %s: %s until %s (was until %s), transitions %+v", after, st.State, st.ToleranceUntil, before.ToleranceUntil, st.Transitions)
	}
}

// unpublish removes a device from its node's ResourceSlice, as a driver does with a device it lost.
func unpublish(t *testing.T, ctx context.Context, kube kubernetes.Interface, id device.ID) {
	t.Helper()
	sl, err := kube.ResourceV1().ResourceSlices().Get(ctx, id.Pool+"-gpu.sim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keep []resourcev1.Device
	for _, d := range sl.Spec.Devices {
		if d.Name != id.Device {
			keep = append(keep, d)
		}
	}
	sl.Spec.Devices = keep
	if _, err := kube.ResourceV1().ResourceSlices().Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
