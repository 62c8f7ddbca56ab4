//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// TestKilledWorkerMidSoakResumesTheSoak SIGKILLs the controller process while a phase soaks and
// starts another: the rollout finishes the soak and passes its gates without enabling the phase
// a second time (one EnableRolloutPhase in the history, one RolloutEnabled Event on the node).
func TestKilledWorkerMidSoakResumesTheSoak(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, dir := ownInfra(t, ctx)
	go func() { _ = (&sim.OwnedDrivers{Kube: s.kube, Logger: testLogger}).Run(ctx) }()
	nodes, err := sim.CreatePool(ctx, s.kube, sim.PoolOptions{Pool: "rokill", Count: 1, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, plan := writePlan(t, "kill", "", rolloutPhase{name: "pool", pool: "rokill", class: "rokill.gpu.sim.devicewarden.io", namespace: "rokill",
		soak: "20s", gates: "{maxDrift: 0}"})
	first := startChild(t, s, dir, "controller-1")
	// The controller registers the rollout search attributes as it starts.
	eventually(t, time.Minute, "rollout started", func() error {
		_, err := api.StartRollout(ctx, s.temporal, plan)
		return err
	})
	waitRollout(t, ctx, s.temporal, plan.Name, time.Minute, "soaking", soaking(0))
	first.kill(t)
	startChild(t, s, dir, "controller-2")

	var st api.RolloutStatus
	if err := s.temporal.GetWorkflow(ctx, api.RolloutID(plan.Name), "").Get(ctx, &st); err != nil {
		t.Fatal(err)
	}
	if st.State != rolloutplan.StateCompleted || len(st.Reports) != 1 || !st.Reports[0].Passed() {
		t.Fatalf("status = %+v", st)
	}
	it := s.temporal.GetWorkflowHistory(ctx, api.RolloutID(plan.Name), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	enables := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "EnableRolloutPhase" {
			enables++
		}
	}
	if enables != 1 {
		t.Fatalf("EnableRolloutPhase scheduled %d times, want once", enables)
	}
	evs, err := s.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + nodes[0] + ",reason=" + kubeobj.EventRolloutEnabled})
	if err != nil || len(evs.Items) != 1 {
		t.Fatalf("RolloutEnabled events: %v, %d", err, len(evs.Items))
	}
	recordHistory(t, ctx, s.temporal, api.RolloutID(plan.Name), "rollout_worker_killed.json")
}

// TestRolloutScheduleOpensAWindow: `devicewarden rollout schedule` creates a Schedule the stock
// Temporal CLI lists; no rollout runs before its window, and at the window (a few seconds away)
// the rollout starts and enables its phase.
func TestRolloutScheduleOpensAWindow(t *testing.T) {
	besideOthers(t) // its pools, namespaces, classes and rollouts are its own
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube, tc := shared.kube, shared.temporal
	nodes, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: "rosched", Count: 1, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	path, plan := writePlan(t, "sched", "", rolloutPhase{name: "pool", pool: "rosched", class: "rosched.gpu.sim.devicewarden.io", namespace: "rosched",
		soak: "2s", gates: "{maxDrift: 0}"})
	at := time.Now().UTC().Add(10 * time.Second).Truncate(time.Second)
	cron := fmt.Sprintf("%d %d %d * * * *", at.Second(), at.Minute(), at.Hour())
	out, err := shared.cli(ctx, "rollout", "schedule", "--plan", path, "--cron", cron, "--window", "1m")
	if err != nil {
		t.Fatalf("schedule: %v\n%s", err, out)
	}
	const id = "rollout-schedule/sched"
	t.Cleanup(func() { _ = tc.ScheduleClient().GetHandle(context.Background(), id).Delete(context.Background()) })
	eventually(t, 30*time.Second, "schedule listed by the temporal CLI", func() error {
		out, err := temporalCLI(t, ctx, "schedule", "list")
		if err != nil || !strings.Contains(out, id) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if time.Now().Before(at) {
		_, err := tc.DescribeWorkflowExecution(ctx, api.RolloutID(plan.Name), "")
		if _, ok := err.(*serviceerror.NotFound); !ok {
			t.Fatalf("the rollout runs before its window: %v", err)
		}
	} else {
		t.Log("the window opened before the check ran; skipping the before-window check")
	}
	st := waitRollout(t, ctx, tc, plan.Name, time.Minute, "completed in its window", func(st api.RolloutStatus) bool {
		return st.State == rolloutplan.StateCompleted
	})
	if !st.Scheduled || len(st.Enabled) != 1 || st.Enabled[0].At.Before(at.Add(-time.Second)) || st.WindowUntil.Before(at) {
		t.Fatalf("status = %+v (window at %s)", st, at)
	}
	wantOwner(t, ctx, kube, nodes[0], sim.OwnerDRA, 0)
	recordHistory(t, ctx, tc, api.RolloutID(plan.Name), "rollout_scheduled.json")
	resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", Query: "WorkflowType = 'RolloutWindowWorkflow'"})
	if err != nil {
		t.Fatal(err)
	}
	recorded := false
	for _, e := range resp.GetExecutions() {
		if strings.HasPrefix(e.GetExecution().GetWorkflowId(), "rollout-window/sched") && !recorded {
			recordHistory(t, ctx, tc, e.GetExecution().GetWorkflowId(), "rollout_window.json")
			recorded = true
		}
	}
	if !recorded {
		t.Fatalf("no window workflow among %d", len(resp.GetExecutions()))
	}

	// The next window finds the run completed: it starts nothing.
	windows := &api.RolloutClient{Client: tc}
	res, err := windows.OpenWindow(ctx, api.OpenWindowInput{Plan: plan, Until: time.Now().Add(time.Minute)})
	if err != nil || !res.Ended || res.State != rolloutplan.StateCompleted {
		t.Fatalf("a window after the completed run: %+v %v", res, err)
	}
	runsOf := func() int64 {
		n, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default",
			Query: fmt.Sprintf("WorkflowId = %q", api.RolloutID(plan.Name))})
		if err != nil {
			t.Fatal(err)
		}
		return n.GetCount()
	}
	if n := runsOf(); n != 1 {
		t.Fatalf("%d runs after a window on a completed rollout, want 1", n)
	}
	// A person starts it again, then terminates it: the next window does not start a third run
	// from phase 0, and says how the last one ended.
	if _, err := api.StartRollout(ctx, tc, plan); err != nil {
		t.Fatal(err)
	}
	if err := tc.TerminateWorkflow(ctx, api.RolloutID(plan.Name), "", "stopped by hand"); err != nil {
		t.Fatal(err)
	}
	res, err = windows.OpenWindow(ctx, api.OpenWindowInput{Plan: plan, Until: time.Now().Add(time.Minute)})
	if err != nil || !res.Ended || res.State != rolloutplan.StateTerminated {
		t.Fatalf("a window after a terminated run: %+v %v", res, err)
	}
	if n := runsOf(); n != 2 {
		t.Fatalf("%d runs after a window on a terminated rollout, want 2", n)
	}
}
