//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// pathsClass devices follow a policy with windows of seconds, an approval and node escalation at two
// failed devices, so one test can take every path of the three workflows.
const pathsClass = "paths.gpu.sim.devicewarden.io"

const pathsPolicy = `
policies:
  - name: paths-test
    match: {deviceClass: ` + pathsClass + `}
    toleranceWindow: 2s
    quarantineLease: 3s
    stabilityWindow: 1s
    approvalRequired: true
    approvalTimeout: 5m
    escalationThreshold: 2
    probe: {timeout: 30s}
    canary: {timeout: 30s}
`

// suggestContinueAsNew is the history length at which this test's server suggests continue-as-new:
// short enough that each workflow continues as new several times on the way.
const suggestContinueAsNew = 100

// TestEveryWorkflowPath takes the device, breaker and node workflows through every path on the real
// server, with continue-as-new suggested every 100 events: Suspect and back to Healthy; the
// tolerance timer held by a pause; the breaker paused by the CLI, a denied device and one refused by
// the worker joining its wait list, and a resume that wakes them; Restricted, Quarantined, node
// escalation; every operator command as an update and as a signal; three reviews rejected or
// approved. The state survives every continue-as-new. With DEVICEWARDEN_RECORD_HISTORY set it
// records every run, which TestReplay and TestReplayCoversEveryPath read.
func TestEveryWorkflowPath(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	pols, err := policy.Parse([]byte(pathsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	pols = pols.WithIdentity(sim.Driver, sim.Identity...)
	s, stopInfra, err := startInfraWith(ctx, t.TempDir(), infraOptions{address: "127.0.0.1:0", suggestContinueAsNew: suggestContinueAsNew})
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	_, stopCtl := s.controller(app.ControllerOptions{Workers: 4, Policies: pols,
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 1000}})
	defer stopCtl()

	if err := sim.EnsureClass(ctx, s.kube, pathsClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, s.kube, "paths", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	d0 := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-0"}
	d1 := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-1"}
	for i := range 2 {
		runningPod(t, ctx, s.kube, sim.Workload{Namespace: "paths", Name: fmt.Sprintf("trainer-%d", i), Node: node, Index: ptr.To(i), Template: true, DeviceClass: pathsClass})
	}
	health := func(id device.ID, h corev1.ResourceHealthStatus) {
		t.Helper()
		if _, err := sim.SetHealth(ctx, s.kube, id, h, "paths test"); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(id device.ID, what string, ok func(decide.DeviceState) bool) decide.DeviceState {
		t.Helper()
		var st decide.DeviceState
		eventually(t, time.Minute, what, func() error {
			var err error
			if st, err = stateOf(ctx, s, id); err != nil {
				return err
			}
			if !ok(st) {
				return fmt.Errorf("state %s paused=%v held=%v review=%+v", st.State, st.Paused, st.Held != nil, st.Review)
			}
			return nil
		})
		return st
	}
	update := func(id device.ID, kind decide.CommandKind, dur time.Duration) {
		t.Helper()
		if _, err := api.SendCommand(ctx, s.temporal, id, decide.Command{Kind: kind, Actor: "ops", Duration: policy.JSONDuration(dur)}, nil); err != nil {
			t.Fatalf("%s update: %v", kind, err)
		}
	}
	signal := func(id device.ID, kind decide.CommandKind) {
		t.Helper()
		if err := s.temporal.SignalWorkflow(ctx, id.WorkflowID(), "", string(kind), decide.Command{Actor: "ops"}); err != nil {
			t.Fatalf("%s signal: %v", kind, err)
		}
	}
	breaker := func(args ...string) {
		t.Helper()
		if _, err := s.cli(ctx, append([]string{"breaker"}, args...)...); err != nil {
			t.Fatalf("breaker %v: %v", args, err)
		}
	}
	suspect := func(st decide.DeviceState) bool { return st.State == decide.Suspect }
	approval := func(st decide.DeviceState) bool { return st.Review != nil && st.Review.Stage == decide.StageApproval }

	// Suspect, Healthy again, Suspect again; a pause keeps the device Suspect past its tolerance window.
	health(d0, corev1.ResourceHealthStatusUnknown)
	wait(d0, "suspect", suspect)
	health(d0, corev1.ResourceHealthStatusHealthy)
	wait(d0, "healthy again", func(st decide.DeviceState) bool { return st.State == decide.Healthy })
	health(d0, corev1.ResourceHealthStatusUnknown)
	wait(d0, "suspect again", suspect)
	update(d0, decide.CmdPause, 0)
	wait(d0, "tolerance over while paused, still suspect", func(st decide.DeviceState) bool {
		return st.State == decide.Suspect && st.Paused && !st.ToleranceUntil.IsZero() && time.Now().After(st.ToleranceUntil.Add(500*time.Millisecond))
	})

	// The breaker, paused by hand, denies the restriction; the worker then refuses d1 itself and
	// hands it to the wait list; resume wakes both.
	breaker("pause", "--actor", "ops", "--reason", "paths test")
	signal(d0, decide.CmdResume)
	wait(d0, "restriction denied by the breaker", func(st decide.DeviceState) bool {
		return st.Held != nil && strings.Contains(st.HeldReason, "circuit breaker open")
	})
	health(d1, corev1.ResourceHealthStatusUnhealthy)
	eventually(t, time.Minute, "d1 on the breaker's wait list", func() error {
		br, err := breakerState(ctx, s.temporal)
		if err != nil {
			return err
		}
		if !slices.Contains(br.Waiting, d1.String()) {
			return fmt.Errorf("waiting %v", br.Waiting)
		}
		return nil
	})
	breaker("resume", "--actor", "ops")
	wait(d0, "restricted once woken", func(st decide.DeviceState) bool { return st.State == decide.Restricted })
	wait(d1, "d1 quarantined once woken", func(st decide.DeviceState) bool { return st.State == decide.Quarantined })

	// Unhealthy: quarantined; the second failed device escalates the node.
	health(d0, corev1.ResourceHealthStatusUnhealthy)
	wait(d0, "quarantined", func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	eventually(t, time.Minute, "node escalated", func() error {
		v, err := s.temporal.QueryWorkflow(ctx, api.NodeWorkflowID(node), "", api.QueryState)
		if err != nil {
			return err
		}
		var ns escalation.NodeState
		if err := v.Get(&ns); err != nil {
			return err
		}
		if !ns.Escalated {
			return fmt.Errorf("node state %+v", ns)
		}
		return nil
	})
	// kubectl describe node shows it: a Warning Event on the node.
	eventually(t, time.Minute, "escalation Event on the node", func() error {
		evs, err := s.kube.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == kubeobj.EventNodeEscalated && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("events on node %s: %d, none %s", node, len(evs.Items), kubeobj.EventNodeEscalated)
	})

	// Extend, pause and resume while quarantined; the lease then ends and reviews need approval.
	update(d0, decide.CmdExtend, time.Second)
	signal(d0, decide.CmdPause)
	wait(d0, "paused", func(st decide.DeviceState) bool { return st.Paused })
	update(d0, decide.CmdResume, 0)
	if err := s.kube.CoreV1().Pods("paths").Delete(ctx, "trainer-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(d0, "first review waits for approval", approval)
	update(d0, decide.CmdReject, 0)
	wait(d0, "rejected", func(st decide.DeviceState) bool { return st.State == decide.Quarantined && st.Review == nil })
	wait(d0, "second review waits for approval", approval)
	signal(d0, decide.CmdReject)
	wait(d0, "rejected by signal", func(st decide.DeviceState) bool { return st.State == decide.Quarantined && st.Review == nil })
	wait(d0, "third review waits for approval", approval)
	update(d0, decide.CmdReleaseApproval, 0)
	st := wait(d0, "released", func(st decide.DeviceState) bool { return st.State == decide.Released })

	// What every continue-as-new carried: the whole record. Released and held by no Pod, the run ended.
	rejected := 0
	for _, tr := range st.Transitions {
		if strings.HasPrefix(tr.Reason, "release rejected by ops") {
			rejected++
		}
	}
	if rejected != 2 || len(st.Closed) != 1 || st.Dropped != 0 {
		t.Fatalf("after two rejections and a release: %d rejections, %d closed quarantines, %d dropped (%s)", rejected, len(st.Closed), st.Dropped, st.LastDropped)
	}
	if n := len(runIDs(t, ctx, s.temporal, d0.WorkflowID())); n < 2 {
		t.Fatalf("the device workflow never continued as new (%d run)", n)
	}
	recordRuns(t, ctx, s.temporal, d0.WorkflowID(), "paths_device")

	// An operator forces the device back (a new run), asks for its release and approves it: once by
	// signals, once by updates (approved by the older signal name).
	start := api.DeviceInput{Device: d0, Node: node, Policy: pols.For(pathsClass, d0.Driver)}
	opts := client.StartWorkflowOptions{ID: d0.WorkflowID(), TaskQueue: api.TaskQueue, TypedSearchAttributes: api.DeviceSearchAttributes(d0, node)}
	if _, err := s.temporal.SignalWithStartWorkflow(ctx, d0.WorkflowID(), api.SignalForceQuarantine, decide.Command{Actor: "ops"}, opts, api.DeviceWorkflow, start); err != nil {
		t.Fatal(err)
	}
	wait(d0, "forced by signal", func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	signal(d0, decide.CmdRelease)
	wait(d0, "release requested by signal waits for approval", approval)
	signal(d0, decide.CmdApprove)
	wait(d0, "released again", func(st decide.DeviceState) bool { return st.State == decide.Released })
	recordHistory(t, ctx, s.temporal, d0.WorkflowID(), "paths_device_signals.json")
	if _, err := api.SendCommand(ctx, s.temporal, d0, decide.Command{Kind: decide.CmdForceQuarantine, Actor: "ops"}, &start); err != nil {
		t.Fatal(err)
	}
	update(d0, decide.CmdRelease, 0)
	wait(d0, "release requested by update waits for approval", approval)
	signal(d0, decide.CmdReleaseApproval) // the older name, as existing tools send it
	wait(d0, "released a third time", func(st decide.DeviceState) bool { return st.State == decide.Released })
	recordHistory(t, ctx, s.temporal, d0.WorkflowID(), "paths_device_updates_v10.json") // the release update records release-after-retirement; paths_device_updates.json is the run before it

	// An operator pausing and resuming the breaker over time; a node hearing of its devices again.
	// The breaker takes a signal that came while its handlers finished before it continues as
	// new, so commands sent back to back can hold it off: each pair is given a moment to land.
	for i := 0; len(runIDs(t, ctx, s.temporal, api.BreakerWorkflowID)) < 2; i++ {
		if i == 20 {
			t.Fatal("the breaker never continued as new")
		}
		breaker("pause", "--actor", "ops")
		breaker("resume", "--actor", "ops")
		for j := 0; j < 10 && len(runIDs(t, ctx, s.temporal, api.BreakerWorkflowID)) < 2; j++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	for i := 0; len(runIDs(t, ctx, s.temporal, api.NodeWorkflowID(node))) < 2; i++ {
		if i == 60 {
			t.Fatal("the node workflow never continued as new")
		}
		f := escalation.NodeFailure{Node: node, Device: d0.String(), State: decide.Quarantined, Threshold: 2}
		if err := s.temporal.SignalWorkflow(ctx, api.NodeWorkflowID(node), "", api.SignalDeviceFailed, f); err != nil {
			t.Fatal(err)
		}
	}
	br, err := breakerState(ctx, s.temporal)
	if err != nil || br.Open || br.ConfiguredBy == "" || br.Denied < 1 || br.ResumedBy != "ops" || !br.WakeWaiting {
		t.Fatalf("breaker after continue-as-new: %+v %v", br, err)
	}
	recordRuns(t, ctx, s.temporal, api.BreakerWorkflowID, "paths_breaker")
	recordRuns(t, ctx, s.temporal, api.NodeWorkflowID(node), "paths_node")

	// The migration limiter continues as new with its holders and queue: requests from migrations
	// that do not exist are granted, their grant fails, and their slot goes to the next.
	limiter := &api.LimiterClient{Client: s.temporal}
	for i := 0; i < 2 || len(runIDs(t, ctx, s.temporal, api.MigrationLimiterID)) < 2; i++ {
		if i == 60 {
			t.Fatal("the migration limiter never continued as new")
		}
		req := migrationplan.SlotRequest{ID: fmt.Sprintf("migrate/none/%d", i), Node: node, PerNode: 1, ClusterWide: 1}
		if err := limiter.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if err := limiter.Release(ctx, req.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	var slots migrationplan.SlotState
	eventually(t, 30*time.Second, "the limiter idle after continue-as-new", func() error {
		err := queryInto(ctx, s.temporal, api.MigrationLimiterID, &slots)
		if err != nil || !slots.Idle() || slots.Granted == 0 {
			return fmt.Errorf("limiter %+v (%v)", slots, err)
		}
		return nil
	})
	recordRuns(t, ctx, s.temporal, api.MigrationLimiterID, "paths_limiter")
}

func breakerState(ctx context.Context, tc client.Client) (breaker.State, error) {
	var br breaker.State
	return br, queryInto(ctx, tc, api.BreakerWorkflowID, &br)
}
