package worker

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/temporalserver/temporaltest"
	"github.com/devicewarden/devicewarden/workflows"
)

// replayModel answers the device workflow's activities from a small model of the cluster (its
// rule, the breaker, the checks), as the simulation in workflows does, but on a real server.
type replayModel struct {
	mu          sync.Mutex
	rule        bool
	breakerOpen bool
	checkFails  int
	// answers names the activities the model answers: a history that schedules another one, or a
	// local activity that panics (the SDK then calls the workflow's own nil method value), means
	// the model misses what the workflow now does.
	answers map[string]bool
	history historyModel
}

func (m *replayModel) register(w sdkworker.Worker) {
	m.answers = map[string]bool{}
	reg := func(name string, fn any) {
		m.answers[name] = true
		w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	reg("AcquirePermit", func(context.Context, remediation.PermitInput) (breaker.PermitResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.breakerOpen {
			return breaker.PermitResult{Reason: "circuit breaker open: simulated"}, nil
		}
		return breaker.PermitResult{Granted: true}, nil
	})
	reg("Quarantine", func(_ context.Context, in remediation.QuarantineInput) (remediation.QuarantineResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.rule = true
		return remediation.QuarantineResult{RuleName: in.Device.TaintRuleName(), Created: true, Effect: string(in.Effect)}, nil
	})
	reg("QuarantineWithPermit", func(_ context.Context, in remediation.QuarantineWithPermitInput) (remediation.QuarantineWithPermitResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.breakerOpen {
			return remediation.QuarantineWithPermitResult{Permit: breaker.PermitResult{Reason: "circuit breaker open: simulated"}}, nil
		}
		m.rule = true
		q := in.Quarantine
		return remediation.QuarantineWithPermitResult{Permit: breaker.PermitResult{Granted: true},
			Rule: remediation.QuarantineResult{RuleName: q.Device.TaintRuleName(), Created: true, Effect: string(q.Effect)}}, nil
	})
	reg("InspectRule", func(_ context.Context, in remediation.InspectInput) (decide.RuleInfo, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return decide.RuleInfo{Present: m.rule, Name: in.Device.TaintRuleName(), Key: decide.TaintQuarantine, Effect: string(in.Effect), WantEffect: string(in.Effect)}, nil
	})
	reg("RefreshRule", func(_ context.Context, in remediation.QuarantineInput) (remediation.RefreshResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return remediation.RefreshResult{Missing: !m.rule, Effect: string(in.Effect)}, nil
	})
	reg("RunCheck", func(_ context.Context, in remediation.CheckInput) (decide.StepResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.checkFails > 0 {
			m.checkFails--
			return decide.StepResult{Reason: "exit 1"}, nil
		}
		return decide.StepResult{Passed: true, Reason: "exit 0"}, nil
	})
	reg("ReleaseRule", func(context.Context, remediation.ReleaseInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.rule = false
		return nil
	})
	for _, name := range []string{"Alert", "NoteAlert", "RequestApproval", "ReportNodeFailure"} {
		reg(name, func(context.Context, any) error { return nil })
	}
	reg("FindWorkloads", func(context.Context, any) ([]api.Workload, error) { return nil, nil })
	m.history.register(reg)
}

// TestSimulatedRunsReplayAfterRestart runs generated sequences of observations, operator commands
// and breaker answers through device workflows on a real Temporal server, restarting the worker
// (its cache purged: the next worker replays each history from the server) and continuing the
// workflow as new at generated points. At every restart and after every sequence the history
// produced so far, every run of it, is replayed by worker.NewWorkflowReplayer and must replay
// without a non-determinism error; at the end the state query must answer.
func TestSimulatedRunsReplayAfterRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, _ := temporaltest.Start(t, temporaltest.SuggestContinueAsNewAfter(60))
	panics := &panicLog{}
	c, err := client.Dial(client.Options{HostPort: srv.FrontendAddress(), Logger: sdklog.NewStructuredLogger(slog.New(panics))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := RegisterSearchAttributes(ctx, c, "default"); err != nil {
		t.Fatal(err)
	}
	m := &replayModel{}
	start := func() sdkworker.Worker {
		w := sdkworker.New(c, api.TaskQueue, sdkworker.Options{})
		for name, fn := range workflows.All {
			w.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name})
		}
		m.register(w)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := start()
	defer func() { w.Stop() }()
	replayer := sdkworker.NewWorkflowReplayer()
	for name, fn := range workflows.All {
		replayer.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name})
	}
	p := policy.Default()
	p.ToleranceWindow, p.QuarantineLease, p.StabilityWindow = policy.JSONDuration(2*time.Second), policy.JSONDuration(3*time.Second), policy.JSONDuration(time.Second)
	restarts, runs, sequences := 0, 0, 0
	var slowest time.Duration
	// Each sequence takes real time (up to 12 steps of up to 1.5 s): 8 of them.
	f := flag.Lookup("rapid.checks")
	old := f.Value.String()
	_ = f.Value.Set("8")
	defer func() { _ = f.Value.Set(old) }()
	rapid.Check(t, func(rt *rapid.T) {
		sequences++
		m.mu.Lock()
		m.rule, m.breakerOpen, m.checkFails = false, false, 0
		m.mu.Unlock()
		dev := device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: fmt.Sprintf("gpu-%d", sequences)}
		id := dev.WorkflowID()
		p.ApprovalRequired = rapid.Bool().Draw(rt, "approval")
		if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: api.TaskQueue},
			api.DeviceWorkflow, api.DeviceInput{Device: dev, Node: "node-1", Policy: p}); err != nil {
			rt.Fatal(err)
		}
		ver := 10
		for i := range rapid.IntRange(3, 12).Draw(rt, "steps") {
			time.Sleep(time.Duration(rapid.IntRange(0, 1500).Draw(rt, fmt.Sprintf("ms%d", i))) * time.Millisecond)
			switch kind := rapid.SampledFrom([]string{"observe", "observe", "command", "breaker", "checks", "restart"}).Draw(rt, fmt.Sprintf("kind%d", i)); kind {
			case "observe":
				h := rapid.SampledFrom([]device.Health{device.Healthy, device.Unknown, device.Unhealthy}).Draw(rt, fmt.Sprintf("health%d", i))
				ver += rapid.IntRange(-1, 2).Draw(rt, fmt.Sprintf("ver%d", i))
				o := decide.Observation{Device: dev, Node: "node-1", Health: h, StatusVersion: fmt.Sprint(ver), Source: decide.SourcePodStatus,
					ObservedAt: time.Now(), Reporters: []decide.Reporter{{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: h}}}
				// The watcher's way: signal-with-start, so a run that ended idle starts again.
				if _, err := c.SignalWithStartWorkflow(ctx, id, api.SignalObservation, o, client.StartWorkflowOptions{ID: id, TaskQueue: api.TaskQueue},
					api.DeviceWorkflow, api.DeviceInput{Device: dev, Node: "node-1", Policy: p}); err != nil {
					rt.Fatalf("observe: %v", err)
				}
			case "command":
				k := rapid.SampledFrom(decide.Commands).Draw(rt, fmt.Sprintf("cmd%d", i))
				cmd := decide.Command{Kind: k, Actor: rapid.SampledFrom([]string{"ops", ""}).Draw(rt, fmt.Sprintf("actor%d", i)), Reason: "simulated"}
				uctx, stop := context.WithTimeout(ctx, 5*time.Second)
				h, err := c.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: string(k), Args: []any{cmd},
					WaitForStage: client.WorkflowUpdateStageAccepted})
				if err == nil {
					err = h.Get(uctx, nil)
				}
				stop()
				if err != nil && err.Error() == "" {
					rt.Fatalf("%s refused without a reason", k)
				}
			case "breaker":
				m.mu.Lock()
				m.breakerOpen = !m.breakerOpen
				m.mu.Unlock()
			case "checks":
				m.mu.Lock()
				m.checkFails = rapid.IntRange(1, 2).Draw(rt, fmt.Sprintf("fails%d", i))
				m.mu.Unlock()
			case "restart":
				w.Stop()
				sdkworker.PurgeStickyWorkflowCache()
				w = start()
				restarts++
				runs += replayAll(ctx, rt, c, replayer, id, m.answers)
			}
		}
		runs += replayAll(ctx, rt, c, replayer, id, m.answers)
		// The query answers: a run that ended idle from its last state, a running one from its
		// worker (after a restart, once the server gives up on the old worker's sticky queue).
		began := time.Now()
		for {
			qctx, stop := context.WithTimeout(ctx, 10*time.Second)
			_, err := c.QueryWorkflow(qctx, id, "", api.QueryState)
			stop()
			if err == nil {
				break
			}
			if time.Since(began) > time.Minute {
				rt.Fatalf("the state query did not answer within a minute: %v", err)
			}
		}
		slowest = max(slowest, time.Since(began))
		_ = c.TerminateWorkflow(ctx, id, "", "sequence done")
		if p := panics.first(); p != "" {
			rt.Fatalf("a local activity panicked (the model does not answer it?): %s", p)
		}
	})
	t.Logf("%d sequences, %d runs replayed, %d worker restarts; the slowest state query took %s", sequences, runs, restarts, slowest.Round(time.Millisecond))
}

// replayAll replays the workflow's current run and the runs it continued from, newest first,
// and returns how many it replayed. Every activity the runs scheduled must be one the model answers.
func replayAll(ctx context.Context, rt *rapid.T, c client.Client, replayer sdkworker.WorkflowReplayer, id string, answers map[string]bool) int {
	n := 0
	for run := ""; ; n++ {
		hist := &historypb.History{}
		for it := c.GetWorkflowHistory(ctx, id, run, false, 0); it.HasNext(); {
			e, err := it.Next()
			if err != nil {
				rt.Fatalf("history of %s/%s: %v", id, run, err)
			}
			hist.Events = append(hist.Events, e)
			if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && !answers[a.GetActivityType().GetName()] {
				rt.Fatalf("%s run %q scheduled %s, which the model does not answer", id, run, a.GetActivityType().GetName())
			}
		}
		if len(hist.Events) < 3 {
			return n // its first workflow task has not completed: nothing to replay yet
		}
		if err := replayer.ReplayWorkflowHistory(nil, hist); err != nil {
			rt.Fatalf("replay of %s run %q (%d events): %v", id, run, len(hist.Events), err)
		}
		run = hist.Events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if run == "" {
			return n + 1
		}
	}
}

// panicLog keeps the first panic the SDK logs.
type panicLog struct {
	mu  sync.Mutex
	msg string
}

func (p *panicLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (p *panicLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(strings.ToLower(r.Message), "panic") {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.msg == "" {
		p.msg = r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "ActivityType" || a.Key == "PanicError" {
				p.msg += " " + a.String()
			}
			return true
		})
	}
	return nil
}

func (p *panicLog) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *panicLog) WithGroup(string) slog.Handler      { return p }

func (p *panicLog) first() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msg
}
