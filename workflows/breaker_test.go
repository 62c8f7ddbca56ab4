package workflows

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/notify"
)

type updateResult struct {
	mu      sync.Mutex
	granted int
	denied  int
}

func (u *updateResult) callbacks() *testsuite.TestUpdateCallback {
	return &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { panic(err) },
		OnComplete: func(v any, err error) {
			u.mu.Lock()
			defer u.mu.Unlock()
			if err != nil {
				panic(err)
			}
			if v.(breaker.PermitResult).Granted {
				u.granted++
			} else {
				u.denied++
			}
		},
	}
}

func TestBreakerWorkflowCapsUntilResume(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	alerts := 0
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(func(_ context.Context, _ notify.AlertInput) error { alerts++; return nil })
	cfg := breaker.Config{Window: 10 * time.Minute, MaxCount: 5, MaxPercent: 100}
	wakes := recordWakes(env)
	var before, after updateResult
	env.RegisterDelayedCallback(func() {
		for i := 0; i < 20; i++ {
			req := breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Action: decide.Quarantined, KnownDevices: 100, Config: cfg}
			env.UpdateWorkflow(api.UpdateAcquire, fmt.Sprint("u", i), before.callbacks(), req)
		}
	}, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalBreakerResume, api.BreakerSignal{Actor: "alice"}) }, time.Hour)
	env.RegisterDelayedCallback(func() {
		req := breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-99"}, Action: decide.Quarantined, KnownDevices: 100, Config: cfg}
		env.UpdateWorkflow(api.UpdateAcquire, "after", after.callbacks(), req)
	}, time.Hour+time.Second)
	var st breaker.State
	queryThenCancel(t, env, 2*time.Hour, &st)
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{})
	if before.granted != 5 || before.denied != 15 {
		t.Fatalf("granted %d denied %d, want 5 and 15", before.granted, before.denied)
	}
	if after.granted != 1 || st.Open || st.ResumedBy != "alice" {
		t.Fatalf("after resume: granted %d open %v resumedBy %q", after.granted, st.Open, st.ResumedBy)
	}
	if alerts != 2 { // one when it opened, one when it was resumed
		t.Fatalf("alerts = %d, want 2", alerts)
	}
	// The 15 denied devices waited instead of polling; the resume woke the oldest 6 (the fresh
	// budget of 5, plus one to re-open the breaker if they all still need it); 9 wait on.
	want := []string{"device/d/p/gpu-5", "device/d/p/gpu-6", "device/d/p/gpu-7", "device/d/p/gpu-8", "device/d/p/gpu-9", "device/d/p/gpu-10"}
	woken := wakes()
	sort.Slice(woken, func(i, j int) bool {
		return len(woken[i]) < len(woken[j]) || len(woken[i]) == len(woken[j]) && woken[i] < woken[j]
	})
	if fmt.Sprint(woken) != fmt.Sprint(want) || len(st.Waiting) != 9 || st.Waiting[0] != "d/p/gpu-11" {
		t.Fatalf("woken %v, still waiting %v", woken, st.Waiting)
	}
}

// The breaker's configuration has one owner: the configure update. A request carrying another
// configuration (a worker with other flags) does not change it; an invalid one is refused.
func TestBreakerConfigureOwnsTheConfig(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(nil)
	owned := breaker.Config{Window: time.Hour, MaxCount: 2, MaxPercent: 100}
	other := breaker.Config{Window: time.Minute, MaxCount: 50, MaxPercent: 100}
	rejected := 0
	cb := func(wantOK bool) *testsuite.TestUpdateCallback {
		return &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) {
			if wantOK {
				t.Errorf("refused: %v", err)
			}
			rejected++
		}, OnComplete: func(any, error) {}}
	}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(api.UpdateBreakerConfigure, "c1", cb(true), api.ConfigureBreaker{Config: owned, Owner: "worker-a"})
		env.UpdateWorkflow(api.UpdateBreakerConfigure, "bad", cb(false), api.ConfigureBreaker{Config: breaker.Config{Window: time.Hour}, Owner: "worker-b"})
		env.UpdateWorkflow(api.UpdateBreakerConfigure, "anon", cb(false), api.ConfigureBreaker{Config: owned})
	}, time.Second)
	var res updateResult
	env.RegisterDelayedCallback(func() {
		for i := 0; i < 5; i++ {
			req := breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Action: decide.Quarantined, KnownDevices: 100, Config: other}
			env.UpdateWorkflow(api.UpdateAcquire, fmt.Sprint("u", i), res.callbacks(), req)
		}
	}, 2*time.Second)
	var st breaker.State
	queryThenCancel(t, env, time.Minute, &st)
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{})
	if rejected != 2 || st.Config != owned || st.ConfiguredBy != "worker-a" || res.granted != 2 {
		t.Fatalf("rejected %d, config %+v by %q, granted %d", rejected, st.Config, st.ConfiguredBy, res.granted)
	}
}

// A signal taken in while the breaker waits on an alert, with continue-as-new suggested meanwhile,
// is carried into the next run (the server only guards signals that arrive in the final task).
func TestBreakerSignalDuringContinueAsNew(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	env.OnActivity("Alert", mock.Anything, mock.Anything).After(10 * time.Second).Return(nil)
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(nil)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalBreakerResume, api.BreakerSignal{Actor: "alice"}) }, time.Minute)
	env.RegisterDelayedCallback(func() {
		env.SetContinueAsNewSuggested(true)
		env.SignalWorkflow(api.SignalBreakerPause, api.BreakerSignal{Actor: "bob", Reason: "maintenance"})
	}, time.Minute+5*time.Second) // while the resume's alert is in flight
	open := &breaker.State{Open: true, Reason: "test", Config: breaker.DefaultConfig()}
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{State: open})
	var next api.BreakerInput
	continuedAs(t, env, &next)
	if next.State == nil || next.State.ResumedBy != "alice" || !next.State.Open || !strings.Contains(next.State.Reason, "paused by bob") {
		t.Fatalf("next run's state %+v: a signal was lost", next.State)
	}
}

// Devices a worker refused on the breaker's behalf join its wait list and are woken on resume.
func TestBreakerWaitSignalJoinsTheWaitList(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(nil)
	wakes := recordWakes(env)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(api.SignalBreakerWait, []string{"d/p/gpu-1", "d/p/gpu-2", "d/p/gpu-1"})
	}, time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalBreakerResume, api.BreakerSignal{Actor: "alice"}) }, 2*time.Minute)
	var st breaker.State
	queryThenCancel(t, env, 3*time.Minute, &st)
	open := &breaker.State{Open: true, Reason: "test", Config: breaker.DefaultConfig()}
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{State: open})
	woken := wakes()
	sort.Strings(woken)
	if fmt.Sprint(woken) != "[device/d/p/gpu-1 device/d/p/gpu-2]" || len(st.Waiting) != 0 {
		t.Fatalf("woken %v, still waiting %v", woken, st.Waiting)
	}
}

// recordWakes collects the workflow IDs the breaker wakes; the test environment delivers external
// signals on goroutines of its own, hence the lock.
func recordWakes(env *testsuite.TestWorkflowEnvironment) func() []string {
	var mu sync.Mutex
	var woken []string
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalBreakerWake, mock.Anything).Return(
		func(_, workflowID, _, _ string, _ any) error {
			mu.Lock()
			defer mu.Unlock()
			woken = append(woken, workflowID)
			return nil
		})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), woken...)
	}
}

// A pause and a resume that reach the breaker together (here while it delivers an alert) are
// applied in the order the operator sent them; signals without a time keep the old order (resumes
// first), so recorded runs replay unchanged.
func TestBreakerAppliesPauseAndResumeInOrderSent(t *testing.T) {
	at := func(sec int64) time.Time { return time.Unix(1700000000+sec, 0) }
	for _, c := range []struct {
		name          string
		pause, resume time.Time
		wantOpen      bool
	}{
		{"pause then resume", at(1), at(2), false},
		{"resume then pause", at(2), at(1), true},
		{"no times: resumes first", time.Time{}, time.Time{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			registerActivities(env)
			env.OnActivity("Alert", mock.Anything, mock.Anything).After(10 * time.Second).Return(nil)
			env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(nil)
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalBreakerPause, api.BreakerSignal{Actor: "ops", Reason: "first"}) }, time.Minute)
			env.RegisterDelayedCallback(func() { // while the first pause's alert is in flight
				env.SignalWorkflow(api.SignalBreakerResume, api.BreakerSignal{Actor: "ops", At: c.resume})
				env.SignalWorkflow(api.SignalBreakerPause, api.BreakerSignal{Actor: "ops", Reason: "second", At: c.pause})
			}, time.Minute+2*time.Second)
			var st breaker.State
			queryThenCancel(t, env, 2*time.Minute, &st)
			env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{State: &breaker.State{Config: breaker.DefaultConfig()}})
			if st.Open != c.wantOpen || st.ResumedBy != "ops" {
				t.Fatalf("open %v, want %v (%+v)", st.Open, c.wantOpen, st)
			}
		})
	}
}
