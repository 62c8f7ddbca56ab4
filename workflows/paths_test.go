package workflows

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A new run takes every current path: each GetVersion gate is open.
func TestNewRunsTakeEveryVersionedPath(t *testing.T) {
	h := newHarness(0)
	var rules decide.Rules
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryRules)
		if err != nil {
			t.Fatalf("query rules: %v", err)
		}
		if err := v.Get(&rules); err != nil {
			t.Fatalf("decode rules: %v", err)
		}
	}, 30*time.Second)
	h.run(t, time.Minute)
	if (rules != decide.Rules{ReleasePath: true, StaleGraceOn: true, BreakerWake: true, FailedProbeHolds: true, SilentNoEvidence: true, Repair: true, StepAlerts: true, LadderTrust: true, StepReports: true, DetectorsNotHolders: true, Causes: true, SourceProof: true, ResetWake: true, CarriedDefaults: true, SourceVerdict: true, RemapsReset: true, FreshAsks: true, KeepsStanding: true, History: true, TakenWords: true, NotRunRetries: true}) {
		t.Fatalf("a new device run follows %+v, not every rule", rules)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	var br breaker.State
	queryThenCancel(t, env, time.Minute, &br)
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{})
	if !br.SeparateBudgets || !br.WakeWaiting || !br.RenewsHolds {
		t.Fatalf("breaker run: separate budgets %v, wake waiting %v", br.SeparateBudgets, br.WakeWaiting)
	}
}

// The Temporal UI's one-line summary (current details) follows the device's state.
func TestCurrentDetailsFollowTheState(t *testing.T) {
	h := newHarness(0)
	var details []string
	read := func() {
		v, err := h.env.QueryWorkflow("__temporal_workflow_metadata")
		if err != nil {
			t.Fatal(err)
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			t.Fatal(err)
		}
		details = append(details, md.GetCurrentDetails())
	}
	h.env.RegisterDelayedCallback(read, 2*time.Second)
	h.env.RegisterDelayedCallback(read, 4*time.Second)
	h.run(t, time.Minute, ob(time.Second, device.Unknown, "1"), ob(3*time.Second, device.Unhealthy, "2"))
	if len(details) != 2 || !strings.Contains(strings.ToLower(details[0]), "suspect") || !strings.Contains(strings.ToLower(details[1]), "quarantined") {
		t.Fatalf("current details %q", details)
	}
}

// A command signal sent without a payload is a command without an actor: refused for that reason
// (every operator action is audited), not taken as a payload that does not decode.
func TestSignalWithoutPayloadIsRefusedForItsActor(t *testing.T) {
	h := newHarness(0)
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(api.SignalPause, nil) }, 2*time.Second)
	got := h.run(t, time.Minute, ob(time.Second, device.Unknown, "1"))
	if got.Paused || got.Dropped != 1 || !strings.Contains(got.LastDropped, "actor is required") {
		t.Fatalf("paused %v, dropped %d %q", got.Paused, got.Dropped, got.LastDropped)
	}
}

// With separate budgets, restrictions (Unknown) never use up the quarantine budget: a storm of
// Unknown cannot stop an Unhealthy device from being fenced.
func TestBreakerKeepsRestrictionsOffTheQuarantineBudget(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(nil).Maybe()
	recordWakes(env)
	cfg := breaker.Config{Window: 10 * time.Minute, MaxCount: 2, MaxPercent: 100}
	var restrict, quarantine updateResult
	env.RegisterDelayedCallback(func() {
		for i := range 5 {
			req := breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Action: decide.Restricted, KnownDevices: 100, Config: cfg}
			env.UpdateWorkflow(api.UpdateAcquire, fmt.Sprint("r", i), restrict.callbacks(), req)
		}
		req := breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-9"}, Action: decide.Quarantined, KnownDevices: 100, Config: cfg}
		env.UpdateWorkflow(api.UpdateAcquire, "q", quarantine.callbacks(), req)
	}, time.Second)
	var st breaker.State
	queryThenCancel(t, env, time.Minute, &st)
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{})
	if restrict.granted != 2 || quarantine.granted != 1 || st.Open || !st.RestrictionsOpen {
		t.Fatalf("restrictions granted %d, quarantine granted %d, open %v, restrictions open %v", restrict.granted, quarantine.granted, st.Open, st.RestrictionsOpen)
	}
}

// The activities run with the timeouts the workflow promises: 30 s for a Kubernetes call, the
// check's own timeout plus two minutes (heartbeating every 30 s at most) for a probe. The rule's
// expiry is one lease from the quarantine, and an extend keeps the quarantine's reason on the rule.
func TestActivityTimeoutsAndRuleFields(t *testing.T) {
	h := newHarness(0)
	var started time.Time
	h.env.RegisterDelayedCallback(func() { started = h.env.Now() }, time.Second)
	got := h.run(t, time.Minute, ob(time.Second, device.Unhealthy, "1"),
		event{at: 2 * time.Second, signal: api.SignalExtend, cmd: decide.Command{Actor: "bob", Duration: policy.JSONDuration(time.Hour)}})
	for _, name := range []string{"Quarantine", "Alert"} {
		if d := startToClose(h.info[name]); d != 30*time.Second {
			t.Errorf("%s start-to-close %s, want 30s", name, d)
		}
	}
	if len(h.quarantine) != 1 || !h.quarantine[0].ExpiresAt.Equal(started.Add(policy.Default().QuarantineLease.D())) {
		t.Fatalf("rule expiry %v, want one lease after %v", h.quarantine, started)
	}
	if len(h.refreshed) != 1 || h.refreshed[0].Reason != got.Quarantine.Reason || h.refreshed[0].Actor != "bob" {
		t.Fatalf("extend refreshed %+v; the quarantine's reason is %q", h.refreshed, got.Quarantine.Reason)
	}
}

func TestCheckTimeouts(t *testing.T) {
	h := newHarness(0)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: "1",
			Reporters: []decide.Reporter{{Pod: "p", Health: device.Unhealthy}}})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Healthy, StatusVersion: "2"})
	}, 2*time.Second)
	var got decide.DeviceState
	queryThenCancel(t, h.env, 48*time.Hour, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	info, ok := h.info["RunCheck"]
	if !ok {
		t.Fatalf("no check ran: %s", got.State)
	}
	last := h.ran[len(h.ran)-1].Check
	if want := last.Timeout.D() + 2*time.Minute; startToClose(info) != want || info.HeartbeatTimeout != 30*time.Second {
		t.Fatalf("check timeouts: start-to-close %s (want %s), heartbeat %s (want 30s)", startToClose(info), want, info.HeartbeatTimeout)
	}
}

// startToClose is an activity's start-to-close timeout, to the second (the test environment's
// deadline is taken from the wall clock).
func startToClose(info activity.Info) time.Duration {
	return info.Deadline.Sub(info.StartedTime).Round(time.Second)
}

// A node escalates once, at the threshold, with one alert sent under a 30 s timeout.
func TestNodeWorkflowEscalatesOnce(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	var alerts []notify.AlertInput
	var info activity.Info
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(func(ctx context.Context, in notify.AlertInput) error {
		alerts, info = append(alerts, in), activity.GetInfo(ctx)
		return nil
	})
	for i, dev := range []string{"gpu-0", "gpu-0", "gpu-1", "gpu-2"} {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(api.SignalDeviceFailed, escalation.NodeFailure{Node: "node-1", Device: "d/node-1/" + dev, State: decide.Quarantined, Threshold: 2})
		}, time.Duration(i+1)*time.Second)
	}
	var st escalation.NodeState
	queryThenCancel(t, env, time.Minute, &st)
	env.ExecuteWorkflow(NodeWorkflow, api.NodeInput{Node: "node-1"})
	if !st.Escalated || len(st.Failed) != 3 || len(alerts) != 1 || alerts[0].WorkflowID != api.NodeWorkflowID("node-1") {
		t.Fatalf("state %+v, alerts %+v", st, alerts)
	}
	if d := startToClose(info); d != 30*time.Second {
		t.Fatalf("alert start-to-close %s", d)
	}
}

// A Kubernetes call that fails is retried from 200 ms, doubling, at most every 30 s.
func TestKubernetesCallsRetryWithBackoff(t *testing.T) {
	h := newHarness(0)
	h.releaseFailures = 9 // the test environment stops retrying after 10 attempts
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: "10",
			Reporters: []decide.Reporter{{Pod: "p"}}})
	}, time.Second)
	podLeaves(h, time.Hour)
	var got decide.DeviceState
	queryThenCancel(t, h.env, 25*time.Hour, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	if len(h.released) != 1 || len(h.releaseAttempts) != 10 {
		t.Fatalf("released %d after %d release attempts %v", len(h.released), len(h.releaseAttempts), h.releaseAttempts)
	}
	want := []time.Duration{200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000}
	for i, w := range want {
		gap := h.releaseAttempts[i+1].Sub(h.releaseAttempts[i]).Round(100 * time.Millisecond)
		if gap != w*time.Millisecond {
			t.Fatalf("retry %d after %s, want %s (all: %v)", i+1, gap, w*time.Millisecond, h.releaseAttempts)
		}
	}
}

// When an activity fails, the device is never left unfenced in silence: an unreachable breaker or
// a failed taint holds the action for a retry (a taint failure also alerts), a check that cannot
// run is taken again later (the tooling's failure, no failed probe), and a rule found missing on
// refresh is put back.
func TestActivityFailuresHoldOrFail(t *testing.T) {
	unhealthy := ob(time.Second, device.Unhealthy, "1")
	t.Run("breaker unreachable", func(t *testing.T) {
		h := newHarness(0)
		h.fail["AcquirePermit"] = "connection refused"
		got := h.run(t, 10*time.Second, unhealthy)
		if got.Held == nil || !strings.Contains(got.HeldReason, "circuit breaker unreachable") || len(h.quarantine) != 0 {
			t.Fatalf("held %v %q, quarantines %d", got.Held != nil, got.HeldReason, len(h.quarantine))
		}
	})
	t.Run("taint failed", func(t *testing.T) {
		h := newHarness(0)
		h.fail["Quarantine"] = "admission webhook denied"
		got := h.run(t, 10*time.Second, unhealthy)
		if got.Held == nil || !strings.Contains(got.HeldReason, "taint failed") || got.TaintFailures != 1 || got.State != decide.Healthy {
			t.Fatalf("held %q, failures %d, state %s", got.HeldReason, got.TaintFailures, got.State)
		}
	})
	t.Run("check could not run", func(t *testing.T) {
		h := newHarness(0)
		h.fail["RunCheck"] = "no identity"
		h.env.RegisterDelayedCallback(func() {
			h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Healthy, StatusVersion: "2"})
		}, 2*time.Second)
		got := h.run(t, 25*time.Hour, unhealthy)
		if got.LastProbe != nil || got.State != decide.Recovering || got.NotRun == nil || got.NotRun.Kind != decide.ActProbe ||
			!strings.Contains(got.NotRun.Reason, "probe could not run") || len(h.released) != 0 {
			t.Fatalf("last probe %+v, state %s, not run %+v, released %d", got.LastProbe, got.State, got.NotRun, len(h.released))
		}
	})
	t.Run("rule missing on refresh", func(t *testing.T) {
		h := newHarness(0)
		h.ruleMissing = true
		h.run(t, time.Minute, unhealthy, event{at: 2 * time.Second, signal: api.SignalExtend, cmd: decide.Command{Actor: "bob", Duration: policy.JSONDuration(time.Hour)}})
		if len(h.refreshed) != 1 || len(h.quarantine) != 2 {
			t.Fatalf("refreshes %d, quarantines %d: a rule found missing must be put back", len(h.refreshed), len(h.quarantine))
		}
	})
}

// The breaker refuses malformed requests in their validators (nothing reaches its history), and a
// wait-list entry that is not a device is skipped on resume rather than stopping the wake-up.
func TestBreakerRefusesMalformedRequests(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(nil).Maybe()
	wakes := recordWakes(env)
	var rejected []string
	reject := &testsuite.TestUpdateCallback{OnAccept: func() {}, OnComplete: func(any, error) {}, OnReject: func(err error) { rejected = append(rejected, err.Error()) }}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(api.UpdateAcquire, "bad-device", reject, breaker.PermitRequest{Device: device.ID{Driver: "d"}, Action: decide.Quarantined})
		env.UpdateWorkflow(api.UpdateBreakerConfigure, "no-owner", reject, api.ConfigureBreaker{Config: breaker.DefaultConfig()})
		env.SignalWorkflow(api.SignalBreakerWait, []string{"not-a-device", "d/p/gpu-1"})
		env.SignalWorkflow(api.SignalBreakerResume, api.BreakerSignal{Actor: "alice"})
	}, time.Second)
	var st breaker.State
	queryThenCancel(t, env, time.Minute, &st)
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{})
	if len(rejected) != 2 || !strings.Contains(rejected[0], "invalid device") || !strings.Contains(rejected[1], "owner is required") {
		t.Fatalf("rejected %q", rejected)
	}
	if w := wakes(); fmt.Sprint(w) != "[device/d/p/gpu-1]" || len(st.Waiting) != 0 {
		t.Fatalf("woken %v, waiting %v", w, st.Waiting)
	}
}

// A rule that cannot be refreshed or inspected changes nothing but is said: a failed refresh
// alerts; a failed inspection is tried again at the next report.
func TestRuleCallsThatFail(t *testing.T) {
	h := newHarness(0)
	h.fail["RefreshRule"] = "forbidden"
	h.fail["InspectRule"] = "timeout"
	got := h.run(t, time.Minute, ob(time.Second, device.Unhealthy, "1"), ob(2*time.Second, device.Unhealthy, "2"),
		event{at: 3 * time.Second, signal: api.SignalExtend, cmd: decide.Command{Actor: "bob", Duration: policy.JSONDuration(time.Hour)}})
	if got.State != decide.Quarantined || len(h.quarantine) != 1 {
		t.Fatalf("state %s, quarantines %d", got.State, len(h.quarantine))
	}
	said := false
	for _, a := range h.alerts {
		said = said || strings.Contains(a.Text, "rule not updated: ") && strings.Contains(a.Text, "forbidden")
	}
	if !said {
		t.Fatalf("no alert for the failed refresh: %+v", h.alerts)
	}
}
