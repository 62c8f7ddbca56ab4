package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/temporalserver/temporaltest"
	"github.com/devicewarden/devicewarden/workflows"
)

// earlierDevice stands for a device workflow served by a worker of a release before the view
// query: it answers `state` only.
func earlierDevice(ctx workflow.Context) error {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	st := decide.DeviceState{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}, Node: "node-1", State: decide.Quarantined,
		Policy: policy.Policy{Name: "gpus", ApprovalRequired: true},
		Quarantine: &decide.QuarantineRecord{RuleName: "rule-0", Reason: "XID 79", CreatedAt: at,
			Ladder: &decide.Ladder{Step: 1, Tries: []decide.RepairTry{{Kind: policy.RepairReset, Attempt: 1, At: at, Result: &decide.StepResult{Reason: "exit 1"}}}}},
		Transitions: []decide.Transition{{From: decide.Healthy, To: decide.Quarantined, Reason: "XID 79", At: at}}}
	if err := workflow.SetQueryHandler(ctx, api.QueryState, func() (decide.DeviceState, error) { return st, nil }); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// Tools read a device through the view query on the real server: the record, the summary line
// and what comes next. A run whose worker knows only `state` is read through it, field by field.
func TestTheViewAnswersOnTheRealServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, c := temporaltest.Start(t)
	if err := RegisterSearchAttributes(ctx, c, "default"); err != nil {
		t.Fatal(err)
	}
	w := sdkworker.New(c, api.TaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(workflows.DeviceWorkflow, workflow.RegisterOptions{Name: api.DeviceWorkflow})
	w.RegisterWorkflowWithOptions(earlierDevice, workflow.RegisterOptions{Name: "EarlierDeviceWorkflow"})
	m := &replayModel{}
	m.register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	dev := device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: "gpu-0"}
	p := policy.Default()
	o := decide.Observation{Device: dev, Node: "node-1", Health: device.Unhealthy, Message: "XID 79", StatusVersion: "2", ObservedAt: time.Now(),
		Reporters: []decide.Reporter{{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: device.Unhealthy}}}
	if _, err := c.SignalWithStartWorkflow(ctx, dev.WorkflowID(), api.SignalObservation, o, client.StartWorkflowOptions{ID: dev.WorkflowID(), TaskQueue: api.TaskQueue},
		api.DeviceWorkflow, api.DeviceInput{Device: dev, Node: "node-1", Policy: p}); err != nil {
		t.Fatal(err)
	}
	var v api.DeviceView
	for v.State != decide.Quarantined {
		if ctx.Err() != nil {
			t.Fatalf("never quarantined: %+v", v)
		}
		time.Sleep(100 * time.Millisecond)
		var err error
		if v, err = api.QueryDevice(ctx, c, dev.WorkflowID(), ""); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(v.Summary, "Quarantined since ") || !strings.Contains(v.Summary, "next: "+v.Next) || v.Next == "" ||
		v.Quarantine == nil || v.Quarantine.RuleName == "" || v.Quarantine.Reason == "" || v.Policy.Name != p.Name ||
		v.Policy.QuarantineLease != p.QuarantineLease || len(v.Reporters) != 1 || len(v.Transitions) != 1 || v.Message != "XID 79" {
		t.Fatalf("view %+v", v)
	}

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "earlier", TaskQueue: api.TaskQueue}, "EarlierDeviceWorkflow")
	if err != nil {
		t.Fatal(err)
	}
	old, err := api.QueryDevice(ctx, c, "earlier", run.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	if old.State != decide.Quarantined || old.Quarantine == nil || old.Quarantine.RuleName != "rule-0" || old.Quarantine.Ladder == nil ||
		len(old.Quarantine.Ladder.Tries) != 1 || old.Quarantine.Ladder.Tries[0].Kind != "reset" || !old.Policy.ApprovalRequired ||
		len(old.Transitions) != 1 || old.Summary != "" {
		t.Fatalf("view through state %+v", old)
	}
	if _, err := api.QueryDevice(ctx, c, "no-such-workflow", ""); err == nil {
		t.Fatal("a workflow that does not exist answered")
	}
}
