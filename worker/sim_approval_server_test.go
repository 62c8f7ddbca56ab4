package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/temporalserver/temporaltest"
	"github.com/devicewarden/devicewarden/workflows"
)

// approvalModel answers the device workflow's activities for sequences aimed at approvals on a
// real server: it keeps the approval requests the workflow sent and the approvals people sent,
// and holds every node step to an approval that named its ask.
type approvalModel struct {
	mu      sync.Mutex
	history historyModel
	// asks are the approval requests of the sequence, oldest first; named the asks an approval
	// named, with when it was sent.
	asks  []notify.ApprovalRequest
	named map[string]time.Time
	// askedAt is when each ask was received.
	askedAt  map[string]time.Time
	nodeRuns int
	released bool
	violated []string
}

func (m *approvalModel) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asks, m.named, m.askedAt, m.nodeRuns, m.released, m.violated = nil, map[string]time.Time{}, map[string]time.Time{}, 0, false, nil
}

// ask is the newest request for the step ("" a release), and whether there is one.
func (m *approvalModel) ask(step string) (notify.ApprovalRequest, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.asks) - 1; i >= 0; i-- {
		if m.asks[i].Step == step {
			return m.asks[i], true
		}
	}
	return notify.ApprovalRequest{}, false
}

func (m *approvalModel) name(review string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.named[review] = at
}

func (m *approvalModel) register(w sdkworker.Worker, p policy.Policy) {
	reg := func(name string, fn any) { w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	granted := func(context.Context, remediation.PermitInput) (breaker.PermitResult, error) {
		return breaker.PermitResult{Granted: true}, nil
	}
	reg("AcquirePermit", granted)
	reg("QuarantineWithPermit", func(_ context.Context, in remediation.QuarantineWithPermitInput) (remediation.QuarantineWithPermitResult, error) {
		q := in.Quarantine
		return remediation.QuarantineWithPermitResult{Permit: breaker.PermitResult{Granted: true},
			Rule: remediation.QuarantineResult{RuleName: q.Device.TaintRuleName(), Created: true, Effect: string(q.Effect)}}, nil
	})
	reg("Quarantine", func(_ context.Context, in remediation.QuarantineInput) (remediation.QuarantineResult, error) {
		return remediation.QuarantineResult{RuleName: in.Device.TaintRuleName(), Created: true, Effect: string(in.Effect)}, nil
	})
	reg("InspectRule", func(_ context.Context, in remediation.InspectInput) (decide.RuleInfo, error) {
		return decide.RuleInfo{Present: true, Name: in.Device.TaintRuleName(), Key: decide.TaintQuarantine, Effect: string(in.Effect), WantEffect: string(in.Effect)}, nil
	})
	reg("RefreshRule", func(_ context.Context, in remediation.QuarantineInput) (remediation.RefreshResult, error) {
		return remediation.RefreshResult{Effect: string(in.Effect)}, nil
	})
	// Every reset, probe and canary passes: a fault that comes back is the driver's report.
	reg("RunCheck", func(context.Context, remediation.CheckInput) (decide.StepResult, error) {
		return decide.StepResult{Passed: true, Reason: "exit 0"}, nil
	})
	reg("RequestApproval", func(_ context.Context, in notify.ApprovalRequest) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.asks = append(m.asks, in)
		if _, seen := m.askedAt[in.Review]; !seen {
			m.askedAt[in.Review] = time.Now()
		}
		return nil
	})
	reg("RemediateNode", func(_ context.Context, in remediation.NodeInput) (decide.StepResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.nodeRuns++
		var ask *notify.ApprovalRequest
		for i := len(m.asks) - 1; i >= 0 && ask == nil; i-- {
			if m.asks[i].Step == string(policy.RepairNode) {
				ask = &m.asks[i]
			}
		}
		switch at, ok := m.named[askID(ask)]; {
		case ask == nil:
			m.violated = append(m.violated, "a node step that needs approval ran although none was asked")
		case !ok || at.Before(m.askedAt[ask.Review]):
			m.violated = append(m.violated, fmt.Sprintf("the node step ran, but no approval named its ask %s (approvals named %v)", ask.Review, m.named))
		}
		return decide.StepResult{Passed: true, Reason: "node booted again"}, nil
	})
	reg("ReleaseRule", func(context.Context, remediation.ReleaseInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.released = true
		return nil
	})
	reg("DevicePolicy", func(context.Context, remediation.PolicyInput) (policy.Policy, error) { return p, nil })
	reg("EndNodeStep", func(context.Context, remediation.NodeInput) error { return nil })
	reg("RecordRetirement", func(context.Context, remediation.RetireInput) (string, error) { return "", nil })
	reg("RevokePermits", func(context.Context, remediation.RevokeInput) ([]breaker.LeaseReport, error) { return nil, nil })
	m.history.register(reg)
	for _, name := range []string{"Alert", "NoteAlert", "ReportNodeFailure"} {
		reg(name, func(context.Context, any) error { return nil })
	}
	reg("FindWorkloads", func(context.Context, any) ([]api.Workload, error) { return nil, nil })
}

func askID(a *notify.ApprovalRequest) string {
	if a == nil {
		return ""
	}
	return a.Review
}

// TestSimulateApprovalsOnAServer runs sequences aimed at one seam on a real server: a person
// approves a device's release with the request's button as the driver reports the device
// Unhealthy again, so the review fails and the ladder asks about a reboot. With the worker down
// while both arrive (a restart, a deploy), the approval and the report reach the workflow in one
// workflow task: the approval is accepted against the release before the report is decided on.
// The node step must still run only on an approval that named its own ask (#52, defect 5b).
func TestSimulateApprovalsOnAServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context() // make simulate runs thousands of sequences: each call has its own timeout
	_, c := temporaltest.Start(t)
	if err := RegisterSearchAttributes(ctx, c, "default"); err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	p.ApprovalRequired, p.ApprovalTimeout = true, policy.JSONDuration(time.Hour)
	p.StabilityWindow = 0
	p.Repair = policy.Repair{Steps: []policy.RepairStep{
		{Kind: policy.RepairReset, Attempts: 1, Check: policy.Check{Image: "reset", Command: []string{"reset"}, Timeout: policy.JSONDuration(time.Minute)}},
		{Kind: policy.RepairNode, Attempts: 1, Approval: true, Holders: policy.HoldersWait,
			Check: policy.Check{Timeout: policy.JSONDuration(10 * time.Minute)}, Template: `{"apiVersion": "r.example.com/v1", "kind": "Reboot"}`}}}
	m := &approvalModel{}
	start := func() sdkworker.Worker {
		w := sdkworker.New(c, api.TaskQueue, sdkworker.Options{StickyScheduleToStartTimeout: time.Second})
		for name, fn := range workflows.All {
			w.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name})
		}
		m.register(w, p)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := start()
	defer func() { w.Stop() }()
	f := flag.Lookup("rapid.checks")
	old, asked := f.Value.String(), false
	flag.Visit(func(g *flag.Flag) { asked = asked || g == f })
	if !asked { // each sequence takes real time (about a second): make simulate asks for more
		_ = f.Value.Set("6")
	}
	defer func() { _ = f.Value.Set(old) }()
	sequences, together := 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		sequences++
		m.reset()
		dev := device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: fmt.Sprintf("gpu-%d", sequences)}
		id := dev.WorkflowID()
		defer func() { _ = c.TerminateWorkflow(ctx, id, "", "sequence done") }()
		in := api.DeviceInput{Device: dev, Node: "node-1", Policy: p}
		report := func(ver int) {
			o := decide.Observation{Device: dev, Node: "node-1", Health: device.Unhealthy, StatusVersion: fmt.Sprint(ver),
				Source: decide.SourceSlice, ObservedAt: time.Now(), Reporters: []decide.Reporter{{Slice: "node-1-gpus", Health: device.Unhealthy}}}
			if _, err := c.SignalWithStartWorkflow(ctx, id, api.SignalObservation, o, client.StartWorkflowOptions{ID: id, TaskQueue: api.TaskQueue},
				api.DeviceWorkflow, in); err != nil {
				rt.Fatalf("report: %v", err)
			}
		}
		report(1)
		// The reset passed its checks; the review waits for the driver, which takes its word back.
		if _, ok := wait(func() (decide.Stage, bool) { stage := stageOf(ctx, c, id); return stage, stage == decide.StageSources }); !ok {
			rt.Fatalf("the review did not wait for its sources: %s", describe(ctx, c, id))
		}
		healed := decide.Observation{Device: dev, Node: "node-1", Health: device.Healthy, StatusVersion: "2", Source: decide.SourceSlice, ObservedAt: time.Now()}
		if err := c.SignalWorkflow(ctx, id, "", api.SignalObservation, healed); err != nil {
			rt.Fatalf("the driver's Healthy: %v", err)
		}
		release, ok := wait(func() (notify.ApprovalRequest, bool) { return m.ask("") })
		if !ok {
			rt.Fatalf("no release approval asked after the reset passed (asks %+v): %s", m.asks, describe(ctx, c, id))
		}
		kind := rapid.SampledFrom([]decide.CommandKind{decide.CmdApprove, decide.CmdReleaseApproval}).Draw(rt, "kind")
		down := rapid.Bool().Draw(rt, "workerDown")
		reportFirst := rapid.Bool().Draw(rt, "reportFirst")
		gap := time.Duration(rapid.IntRange(0, 200).Draw(rt, "gapMs")) * time.Millisecond
		approve := func(review string) chan error {
			done := make(chan error, 1)
			m.name(review, time.Now())
			go func() {
				uctx, stop := context.WithTimeout(ctx, 30*time.Second)
				defer stop()
				h, err := c.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: string(kind),
					Args: []any{decide.Command{Actor: "ana", Review: review}}, WaitForStage: client.WorkflowUpdateStageAccepted})
				if err == nil {
					err = h.Get(uctx, nil)
				}
				done <- err
			}()
			return done
		}
		if down {
			together++
			w.Stop()
		}
		var answered chan error
		if reportFirst {
			report(3)
			time.Sleep(gap)
			answered = approve(release.Review)
		} else {
			answered = approve(release.Review)
			time.Sleep(gap)
			report(3)
		}
		if down {
			time.Sleep(50 * time.Millisecond) // the update reaches the server before the worker polls
			w = start()
		}
		if err := <-answered; err != nil && !isRefusal(err) {
			rt.Fatalf("the approval was not answered: %v", err)
		}
		// Either the release was approved before the report (the device is back and the report
		// quarantines it again), or the report failed the review and the ladder asks about the
		// node step. Give a wrongly approved reboot time to run (it runs within milliseconds).
		time.Sleep(300 * time.Millisecond)
		node, asked := m.ask(string(policy.RepairNode))
		if asked && rapid.Bool().Draw(rt, "approveTheReboot") {
			if err := <-approve(node.Review); err != nil {
				rt.Fatalf("the reboot's own approval: %v", err)
			}
			if _, ran := wait(func() (int, bool) { m.mu.Lock(); defer m.mu.Unlock(); return m.nodeRuns, m.nodeRuns > 0 }); !ran {
				rt.Fatalf("the node step did not run on its own approval %s", node.Review)
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.violated) > 0 {
			rt.Fatalf("%d violation(s), first: %s (worker down %t, report first %t, %s of %s)", len(m.violated), m.violated[0], down, reportFirst, kind, release.Review)
		}
	})
	t.Logf("%d sequences, %d with the worker down while the approval and the report arrived", sequences, together)
}

// wait polls f for up to 15 s.
func wait[T any](f func() (T, bool)) (T, bool) {
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if v, ok := f(); ok || time.Now().After(end) {
			return v, ok
		}
	}
}

// isRefusal says whether an update was refused by its validator (the device's state moved on).
func isRefusal(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app)
}

// describe is the device's last transitions, for a failure's message.
// stageOf is the stage of the device's review ("" when none, or when the query fails).
func stageOf(ctx context.Context, c client.Client, id string) decide.Stage {
	ctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	var st decide.DeviceState
	v, err := c.QueryWorkflow(ctx, id, "", api.QueryState)
	if err != nil || v.Get(&st) != nil || st.Review == nil {
		return ""
	}
	return st.Review.Stage
}

func describe(ctx context.Context, c client.Client, id string) string {
	ctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	v, err := c.QueryWorkflow(ctx, id, "", api.QueryState)
	if err != nil {
		return err.Error()
	}
	var st decide.DeviceState
	if err := v.Get(&st); err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("%s health %s v%q ignored %d dropped %q", st.State, st.Health, st.StatusVersion, st.Ignored, st.LastDropped)
	for _, tr := range st.Transitions[max(0, len(st.Transitions)-4):] {
		out += "; " + tr.Reason
	}
	return out
}
