package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

var gpu0 = device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: "gpu-0"}

// event is a signal delivered at a time offset from the workflow's start.
type event struct {
	at     time.Duration
	obs    *device.Health
	ver    string
	idle   bool
	signal string
	cmd    decide.Command
}

func ob(at time.Duration, h device.Health, ver string) event {
	return event{at: at, obs: &h, ver: ver}
}

type harness struct {
	// mu guards what the activity mocks record: the workflow may run several activities at once
	// (an alert beside the node report), each on a goroutine of its own.
	mu         sync.Mutex
	env        *testsuite.TestWorkflowEnvironment
	pol        *policy.Policy // the device's policy (default policy.Default())
	quarantine []remediation.QuarantineInput
	denyFirst  int // AcquirePermit denies this many requests first
	// resetDenials: AcquirePermit refuses this many reset permits first; resetAsks are when
	// reset permits were asked for.
	resetDenials int
	resetAsks    []time.Time
	resetHolds   []time.Duration
	rebootAsks   int
	// nodeGone: a node step's permit finds its node deleted.
	nodeGone bool
	permits  int
	// combined counts QuarantineWithPermit calls: the permit and the rule in one local activity.
	combined int
	// nodeReports are the failures reported to the node's workflow.
	nodeReports []escalation.NodeFailure
	// rule is what InspectRule answers; checks are the outcomes RunCheck returns in order
	// (a pass once they run out); ran, refreshed, released and approvals record the calls.
	rule      decide.RuleInfo
	checks    []decide.StepResult
	ran       []remediation.CheckInput
	refreshed []remediation.QuarantineInput
	released  []remediation.ReleaseInput
	approvals []notify.ApprovalRequest
	// appliedEffect is the effect Quarantine says it applied ("" = none said, as older workers).
	appliedEffect string
	// releaseFailures makes ReleaseRule fail this many times first; releaseAttempts are the
	// (test clock) times of its calls.
	releaseFailures int
	releaseAttempts []time.Time
	// info is the activity info of each activity type's last call (its timeouts).
	info map[string]activity.Info
	// fail makes an activity type fail without retry, with this message.
	fail   map[string]string
	alerts []notify.AlertInput
	// held are the alerts the permit requests carried and the worker took (the action held);
	// notes the alerts handed to the worker's summary (NoteAlert).
	held, notes []notify.AlertInput
	// ruleMissing makes RefreshRule find no rule.
	ruleMissing bool
	// nodeReportFailures makes ReportNodeFailure fail this many times first (each retry waits);
	// nodeReportedAt is the test clock when one succeeded.
	nodeReportFailures int
	nodeReportedAt     time.Time
	// history is the device history records the run reads and writes.
	history *historyStore
}

// failed answers for an activity type the test made fail.
func (h *harness) failed(name string) error {
	if msg, ok := h.fail[name]; ok {
		return temporal.NewNonRetryableApplicationError(msg, "Test", nil)
	}
	return nil
}

func (h *harness) seen(ctx context.Context, name string) { h.info[name] = activity.GetInfo(ctx) }

func newHarness(denyFirst int) *harness {
	var s testsuite.WorkflowTestSuite
	h := &harness{env: s.NewTestWorkflowEnvironment(), denyFirst: denyFirst, info: map[string]activity.Info{}, fail: map[string]string{}}
	h.history = registerActivities(h.env)
	h.env.OnActivity("Quarantine", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in remediation.QuarantineInput) (remediation.QuarantineResult, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.quarantineRule(ctx, in)
		})
	h.env.OnActivity("AcquirePermit", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in remediation.PermitInput) (breaker.PermitResult, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.acquirePermit(ctx, in)
		})
	h.env.OnActivity("QuarantineWithPermit", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in remediation.QuarantineWithPermitInput) (remediation.QuarantineWithPermitResult, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.combined++
			permit, err := h.acquirePermit(ctx, in.Permit)
			if err != nil {
				return remediation.QuarantineWithPermitResult{}, temporal.NewNonRetryableApplicationError(err.Error(), remediation.ErrPermitUnavailable, err)
			}
			if !permit.Granted {
				return remediation.QuarantineWithPermitResult{Permit: permit}, nil
			}
			rule, err := h.quarantineRule(ctx, in.Quarantine)
			return remediation.QuarantineWithPermitResult{Permit: permit, Rule: rule}, err
		}).Maybe()
	h.env.OnActivity("NoteAlert", mock.Anything, mock.Anything).Return(func(_ context.Context, in notify.AlertInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.notes = append(h.notes, in)
		return nil
	}).Maybe()
	h.env.OnActivity("Alert", mock.Anything, mock.Anything).Return(func(ctx context.Context, in notify.AlertInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.seen(ctx, "Alert")
		h.alerts = append(h.alerts, in)
		return nil
	})
	h.rule = decide.RuleInfo{Present: true, Key: decide.TaintQuarantine, Effect: "NoSchedule", WantEffect: "NoSchedule"}
	h.env.OnActivity("InspectRule", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in remediation.InspectInput) (decide.RuleInfo, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.rule, h.failed("InspectRule")
		})
	h.env.OnActivity("RefreshRule", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in remediation.QuarantineInput) (remediation.RefreshResult, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.refreshed = append(h.refreshed, in)
			if err := h.failed("RefreshRule"); err != nil {
				return remediation.RefreshResult{}, err
			}
			return remediation.RefreshResult{Effect: string(in.Effect), Missing: h.ruleMissing}, nil
		})
	h.env.OnActivity("RunCheck", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in remediation.CheckInput) (decide.StepResult, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.seen(ctx, "RunCheck")
			h.ran = append(h.ran, in)
			if err := h.failed("RunCheck"); err != nil {
				return decide.StepResult{}, err
			}
			if len(h.checks) == 0 {
				return decide.StepResult{Passed: true, Reason: "exit 0"}, nil
			}
			r := h.checks[0]
			h.checks = h.checks[1:]
			return r, nil
		})
	h.env.OnActivity("ReleaseRule", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in remediation.ReleaseInput) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.releaseAttempts = append(h.releaseAttempts, h.env.Now())
			if h.releaseFailures > 0 {
				h.releaseFailures--
				return errors.New("apiserver unavailable")
			}
			h.released = append(h.released, in)
			return nil
		})
	h.env.OnActivity("RequestApproval", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in notify.ApprovalRequest) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.approvals = append(h.approvals, in)
			return nil
		})
	h.env.OnActivity("ReportNodeFailure", mock.Anything, mock.Anything).Return(
		func(_ context.Context, f escalation.NodeFailure) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.nodeReportFailures > 0 {
				h.nodeReportFailures--
				return errors.New("node workflow unreachable")
			}
			h.nodeReports = append(h.nodeReports, f)
			h.nodeReportedAt = h.env.Now()
			return nil
		})
	return h
}

func (h *harness) quarantineRule(ctx context.Context, in remediation.QuarantineInput) (remediation.QuarantineResult, error) {
	h.seen(ctx, "Quarantine")
	if err := h.failed("Quarantine"); err != nil {
		return remediation.QuarantineResult{}, err
	}
	h.quarantine = append(h.quarantine, in)
	return remediation.QuarantineResult{RuleName: in.Device.TaintRuleName(), Created: true, Effect: h.appliedEffect}, nil
}

func (h *harness) acquirePermit(_ context.Context, in remediation.PermitInput) (breaker.PermitResult, error) {
	if in.Action == breaker.Reboot {
		h.rebootAsks++
		if h.nodeGone {
			return breaker.PermitResult{}, temporal.NewNonRetryableApplicationError("node node-1 no longer exists", remediation.ErrNodeGone, nil)
		}
		return breaker.PermitResult{Granted: true}, nil
	}
	if in.Action == breaker.Reset {
		h.resetAsks = append(h.resetAsks, h.env.Now())
		h.resetHolds = append(h.resetHolds, in.Hold)
		if h.resetDenials > 0 {
			h.resetDenials--
			return breaker.PermitResult{Reason: "reset budget spent: test"}, nil
		}
		return breaker.PermitResult{Granted: true}, nil
	}
	h.permits++
	if err := h.failed("AcquirePermit"); err != nil {
		return breaker.PermitResult{}, err
	}
	if h.denyFirst > 0 {
		h.denyFirst--
		if in.HeldAlert != nil {
			h.held = append(h.held, *in.HeldAlert)
			return breaker.PermitResult{Reason: "circuit breaker open: test", Alerted: true}, nil
		}
		return breaker.PermitResult{Reason: "circuit breaker open: test"}, nil
	}
	return breaker.PermitResult{Granted: true}, nil
}

// run delivers the events, queries the state at `end`, then cancels the workflow.
func (h *harness) run(t *testing.T, end time.Duration, events ...event) decide.DeviceState {
	t.Helper()
	for _, e := range events {
		e := e
		h.env.RegisterDelayedCallback(func() {
			if e.obs != nil {
				o := decide.Observation{Device: gpu0, Node: "node-1", Health: *e.obs, StatusVersion: e.ver, ObservedAt: time.Unix(1700000000, 0),
					Reporters: []decide.Reporter{{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: *e.obs}}}
				if e.idle {
					// No Pod holds the device: the watcher says so with a bare Healthy.
					o.Reporters, o.Health = nil, device.Healthy
				}
				h.env.SignalWorkflow(api.SignalObservation, o)
				return
			}
			h.env.SignalWorkflow(e.signal, e.cmd)
		}, e.at)
	}
	var got decide.DeviceState
	queryThenCancel(t, h.env, end, &got)
	p := policy.Default()
	if h.pol != nil {
		p = *h.pol
	}
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	return got
}

func TestDeviceWorkflowTransitions(t *testing.T) {
	tests := []struct {
		name        string
		denyFirst   int
		end         time.Duration
		events      []event
		wantState   decide.State
		wantEffects []string
		wantIgnored int
	}{
		{name: "unhealthy quarantines", end: time.Minute, events: []event{ob(time.Second, device.Unhealthy, "10")},
			wantState: decide.Quarantined, wantEffects: []string{"NoSchedule"}},
		{name: "unknown then healthy inside the window: no taint", end: 12 * time.Minute,
			events:    []event{ob(time.Second, device.Unknown, "10"), ob(4*time.Minute, device.Healthy, "11"), ob(5*time.Minute, device.Healthy, "11")},
			wantState: decide.Healthy, wantIgnored: 1},
		{name: "unknown past the window: NoSchedule, no eviction", end: 6 * time.Minute,
			events:    []event{ob(time.Second, device.Unknown, "10")},
			wantState: decide.Restricted, wantEffects: []string{"NoSchedule"}},
		{name: "duplicate and out-of-order events change nothing", end: time.Minute,
			events:    []event{ob(time.Second, device.Unhealthy, "10"), ob(2*time.Second, device.Unhealthy, "10"), ob(3*time.Second, device.Healthy, "9")},
			wantState: decide.Quarantined, wantEffects: []string{"NoSchedule"}, wantIgnored: 2},
		// Healthy at 1m goes stale at 11m; as the second Unknown episode its window is 10m (backoff).
		{name: "stale healthy becomes unknown, then restricted", end: 22 * time.Minute,
			events:    []event{ob(time.Second, device.Unknown, "10"), ob(time.Minute, device.Healthy, "11")},
			wantState: decide.Restricted, wantEffects: []string{"NoSchedule"}},
		{name: "breaker denies, the action waits for the breaker's wake, then goes through", denyFirst: 1, end: 2 * time.Minute,
			events:    []event{ob(time.Second, device.Unhealthy, "10"), {at: time.Minute, signal: api.SignalBreakerWake}},
			wantState: decide.Quarantined, wantEffects: []string{"NoSchedule"}},
		{name: "breaker denies and never wakes: retried at the fallback", denyFirst: 1, end: 11 * time.Minute,
			events:    []event{ob(time.Second, device.Unhealthy, "10")},
			wantState: decide.Quarantined, wantEffects: []string{"NoSchedule"}},
		{name: "breaker keeps denying: nothing is tainted", denyFirst: 1000, end: 10 * time.Minute,
			events:    []event{ob(time.Second, device.Unhealthy, "10")},
			wantState: decide.Healthy},
		{name: "force-quarantine by a person skips the breaker", denyFirst: 1000, end: time.Minute,
			events:    []event{{at: time.Second, signal: api.SignalForceQuarantine, cmd: decide.Command{Actor: "bob", Reason: "ECC"}}},
			wantState: decide.Quarantined, wantEffects: []string{"NoSchedule"}},
		{name: "paused device acts only after resume", end: time.Hour,
			events: []event{{at: time.Second, signal: api.SignalPause, cmd: decide.Command{Actor: "alice"}},
				ob(2*time.Second, device.Unhealthy, "10"), {at: 30 * time.Minute, signal: api.SignalResume, cmd: decide.Command{Actor: "alice"}}},
			wantState: decide.Quarantined, wantEffects: []string{"NoSchedule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(tt.denyFirst)
			got := h.run(t, tt.end, tt.events...)
			if got.State != tt.wantState {
				t.Fatalf("state = %s, want %s; transitions %+v; held %q", got.State, tt.wantState, got.Transitions, got.HeldReason)
			}
			if len(h.quarantine) != len(tt.wantEffects) {
				t.Fatalf("quarantine calls = %+v, want effects %v", h.quarantine, tt.wantEffects)
			}
			for i, q := range h.quarantine {
				if string(q.Effect) != tt.wantEffects[i] {
					t.Fatalf("effect %d = %s, want %s", i, q.Effect, tt.wantEffects[i])
				}
			}
			if got.Ignored != tt.wantIgnored {
				t.Fatalf("ignored = %d, want %d", got.Ignored, tt.wantIgnored)
			}
			if len(h.nodeReports) != len(tt.wantEffects) {
				t.Fatalf("node reports = %+v, want one per taint", h.nodeReports)
			}
			for _, f := range h.nodeReports {
				if f.Node != "node-1" || f.Threshold != policy.Default().EscalationThreshold {
					t.Fatalf("node report %+v", f)
				}
			}
		})
	}
}

func TestDeviceWorkflowForceQuarantineRecordsActor(t *testing.T) {
	h := newHarness(0)
	got := h.run(t, time.Minute, event{at: time.Second, signal: api.SignalForceQuarantine, cmd: decide.Command{Actor: "bob", Reason: "ECC"}},
		event{at: 2 * time.Second, signal: api.SignalExtend, cmd: decide.Command{Actor: "bob", Duration: policy.JSONDuration(48 * time.Hour)}})
	if got.Quarantine == nil || got.Quarantine.Actor != "bob" || h.quarantine[0].Actor != "bob" {
		t.Fatalf("quarantine %+v", got.Quarantine)
	}
	if d := got.Quarantine.ExpiresAt.Sub(got.Quarantine.CreatedAt); d != 72*time.Hour {
		t.Fatalf("lease after extend = %s, want 72h", d)
	}
}

func TestDeviceWorkflowEndsWhenIdle(t *testing.T) {
	h := newHarness(0)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Health: device.Unknown, StatusVersion: "5",
			Reporters: []decide.Reporter{{Pod: "p"}}})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Health: device.Healthy, StatusVersion: "6"})
	}, time.Minute)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	if !h.env.IsWorkflowCompleted() || h.env.GetWorkflowError() != nil {
		t.Fatalf("completed=%v err=%v", h.env.IsWorkflowCompleted(), h.env.GetWorkflowError())
	}
}

func TestDeviceWorkflowContinueAsNewKeepsState(t *testing.T) {
	h := newHarness(0)
	h.env.SetContinueAsNewSuggested(true)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Health: device.Unhealthy, StatusVersion: "7",
			Reporters: []decide.Reporter{{Pod: "p"}}})
	}, time.Second)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	var next api.DeviceInput
	continuedAs(t, h.env, &next)
	var carried decide.DeviceState
	if err := json.Unmarshal(next.State, &carried); err != nil {
		t.Fatalf("carried state does not decode: %v", err)
	}
	if carried.State != decide.Quarantined || carried.StatusVersion != "7" || carried.Quarantine == nil {
		t.Fatalf("state not carried: %s", next.State)
	}
	if next.Device != gpu0 || next.Policy.Name != "default" {
		t.Fatalf("input not carried: %+v", next)
	}
}

// queryThenCancel queries the workflow's `state` into `into` at `at`, then cancels it so that
// ExecuteWorkflow returns.
func queryThenCancel(t *testing.T, env *testsuite.TestWorkflowEnvironment, at time.Duration, into any) {
	t.Helper()
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(api.QueryState)
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		if err := v.Get(into); err != nil {
			t.Fatalf("decode state: %v", err)
		}
		env.CancelWorkflow()
	}, at)
}

// The watcher's observations arrive as updates that complete once the workflow took them in; a
// payload that does not decode is refused and changes nothing.
func TestDeviceWorkflowObservationUpdate(t *testing.T) {
	h := newHarness(0)
	var completed, rejected int
	cb := func(wantOK bool) *testsuite.TestUpdateCallback {
		return &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) {
				if wantOK {
					t.Errorf("observation refused: %v", err)
				}
				rejected++
			},
			OnComplete: func(_ interface{}, err error) {
				if err != nil || !wantOK {
					t.Errorf("completed: %v (want ok %v)", err, wantOK)
				}
				completed++
			},
		}
	}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateObservation, "bad", cb(false), map[string]any{"health": []int{1}})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateObservation, "1", cb(true), decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: "5",
			Reporters: []decide.Reporter{{Pod: "p", Health: device.Unhealthy}}})
	}, 2*time.Second)
	var got decide.DeviceState
	queryThenCancel(t, h.env, time.Minute, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	if completed != 1 || rejected != 1 {
		t.Fatalf("completed %d rejected %d, want 1 and 1", completed, rejected)
	}
	if got.State != decide.Quarantined || got.StatusVersion != "5" || len(h.quarantine) != 1 {
		t.Fatalf("state %s version %q quarantines %d", got.State, got.StatusVersion, len(h.quarantine))
	}
}

// An automatic taint takes its permit and creates its rule in one local activity. Which half
// failed still decides what the device waits for: an unreachable breaker, or a failed taint.
func TestDeviceWorkflowPermitAndRuleInOneActivity(t *testing.T) {
	h := newHarness(0)
	got := h.run(t, time.Minute, ob(time.Second, device.Unhealthy, "10"))
	if got.State != decide.Quarantined || h.combined != 1 || h.permits != 1 || len(h.quarantine) != 1 {
		t.Fatalf("state %s after %d combined calls, %d permits, %d rules", got.State, h.combined, h.permits, len(h.quarantine))
	}
	for _, tc := range []struct{ fail, reason string }{
		{"AcquirePermit", "circuit breaker unreachable"},
		{"Quarantine", "taint failed"},
	} {
		h := newHarness(0)
		h.fail[tc.fail] = "apiserver unavailable"
		got := h.run(t, 10*time.Second, ob(time.Second, device.Unhealthy, "10"))
		if got.State == decide.Quarantined || got.Held == nil || !strings.HasPrefix(got.HeldReason, tc.reason) || !strings.Contains(got.HeldReason, "apiserver unavailable") {
			t.Errorf("%s failing: state %s, held %v for %q; want held for %q", tc.fail, got.State, got.Held, got.HeldReason, tc.reason)
		}
		if len(h.quarantine) != 0 {
			t.Errorf("%s failing: %d rules recorded", tc.fail, len(h.quarantine))
		}
	}
}

// An operator's force-quarantine is answered once the rule is there: the node report and the
// alert it sets off follow, and a slow one does not hold the answer back.
func TestDeviceWorkflowOperatorAnswerDoesNotWaitForNotices(t *testing.T) {
	h := newHarness(0)
	h.nodeReportFailures = 3 // retried at +200 ms, +400 ms, +800 ms
	var answeredAt time.Time
	var res decide.CommandResult
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(string(decide.CmdForceQuarantine), "force", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Errorf("rejected: %v", err) },
			OnComplete: func(v any, err error) {
				if err != nil {
					t.Errorf("force-quarantine failed: %v", err)
				}
				res, _ = v.(decide.CommandResult)
				answeredAt = h.env.Now()
			},
		}, decide.Command{Actor: "alice", Reason: "bad fan"})
	}, time.Second)
	got := h.run(t, time.Minute)
	if res.State != decide.Quarantined || got.State != decide.Quarantined || len(h.quarantine) != 1 {
		t.Fatalf("answer %+v, state %s, %d rules", res, got.State, len(h.quarantine))
	}
	if len(h.nodeReports) != 1 || answeredAt.IsZero() || !answeredAt.Before(h.nodeReportedAt) {
		t.Fatalf("answered at %s, node reported at %s (%d reports): the answer waited for the report",
			answeredAt.Format(time.StampMilli), h.nodeReportedAt.Format(time.StampMilli), len(h.nodeReports))
	}
}

// A device the breaker denied does not ask again every 30 s: one request before the fallback.
func TestDeviceWorkflowDeniedDoesNotPoll(t *testing.T) {
	h := newHarness(1000)
	got := h.run(t, decide.BreakerFallback-time.Second, ob(time.Second, device.Unhealthy, "10"))
	if h.permits != 1 || got.Held == nil {
		t.Fatalf("%d permit requests in %s, held %v", h.permits, decide.BreakerFallback, got.Held)
	}
}

// A held device's alert rides with its permit request, and the worker sends it with the others
// held: no Alert activity of its own. Granted on a later try, the quarantine's alerts are its own.
func TestDeviceWorkflowHeldAlertRidesWithThePermit(t *testing.T) {
	h := newHarness(1)
	got := h.run(t, 2*time.Minute, ob(time.Second, device.Unhealthy, "10"), event{at: time.Minute, signal: api.SignalBreakerWake})
	if len(h.held) != 1 || h.held[0].Level != decide.LevelCritical || !strings.Contains(h.held[0].Text, "device reported Unhealthy") || h.held[0].Device != gpu0 {
		t.Fatalf("alerts carried with the permit: %+v", h.held)
	}
	for _, a := range h.alerts {
		if a.Text == h.held[0].Text {
			t.Fatalf("the held alert also went as an activity: %+v", h.alerts)
		}
	}
	if got.State != decide.Quarantined || h.permits != 2 {
		t.Fatalf("state %s after %d permit requests", got.State, h.permits)
	}
}

// The warning of a tolerated Unknown report, and the notice of Healthy again within the window,
// join the worker's summary (NoteAlert): no Alert activity of their own.
func TestDeviceWorkflowUnknownAlertsJoinTheSummary(t *testing.T) {
	h := newHarness(0)
	h.run(t, 2*time.Minute, ob(time.Second, device.Unknown, "10"), ob(time.Minute, device.Healthy, "11"))
	if len(h.notes) != 2 || h.notes[0].Level != decide.LevelWarning || h.notes[1].Level != decide.LevelInfo || h.notes[0].Device != gpu0 {
		t.Fatalf("notes %+v", h.notes)
	}
	if len(h.alerts) != 0 {
		t.Fatalf("alerts as activities: %+v", h.alerts)
	}
}

// A carried state that does not decode stops the workflow's task with the reason (a panic, which
// Temporal retries until a worker can take it), as an input that does not decode did: the run
// and its history stay.
func TestACarriedStateThatDoesNotDecodeStopsTheTask(t *testing.T) {
	h := newHarness(0)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default(), State: json.RawMessage(`{"state":7}`)})
	var panicked *temporal.PanicError
	if err := h.env.GetWorkflowError(); !errors.As(err, &panicked) || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("want the task stopped on the carried state, got %v", err)
	}
}
