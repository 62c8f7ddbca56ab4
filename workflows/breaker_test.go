package workflows

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
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
			if v.(policy.PermitResult).Granted {
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
	env.RegisterActivity(&activities.Activities{})
	alerts := 0
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(func(_ context.Context, _ activities.AlertInput) error { alerts++; return nil })
	cfg := policy.BreakerConfig{Window: 10 * time.Minute, MaxCount: 5, MaxPercent: 100}
	var before, after updateResult
	env.RegisterDelayedCallback(func() {
		for i := 0; i < 20; i++ {
			req := policy.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Action: policy.Quarantined, KnownDevices: 100, Config: cfg}
			env.UpdateWorkflow(UpdateAcquire, fmt.Sprint("u", i), before.callbacks(), req)
		}
	}, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalBreakerResume, BreakerSignal{Actor: "alice"}) }, time.Hour)
	env.RegisterDelayedCallback(func() {
		req := policy.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-99"}, Action: policy.Quarantined, KnownDevices: 100, Config: cfg}
		env.UpdateWorkflow(UpdateAcquire, "after", after.callbacks(), req)
	}, time.Hour+time.Second)
	var st policy.BreakerState
	queryThenCancel(t, env, 2*time.Hour, &st)
	env.ExecuteWorkflow(BreakerWorkflow, BreakerInput{})
	if before.granted != 5 || before.denied != 15 {
		t.Fatalf("granted %d denied %d, want 5 and 15", before.granted, before.denied)
	}
	if after.granted != 1 || st.Open || st.ResumedBy != "alice" {
		t.Fatalf("after resume: granted %d open %v resumedBy %q", after.granted, st.Open, st.ResumedBy)
	}
	if alerts != 2 { // one when it opened, one when it was resumed
		t.Fatalf("alerts = %d, want 2", alerts)
	}
}

func TestNodeWorkflowEscalatesAtThreshold(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	var texts []string
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.AlertInput) error {
		texts = append(texts, in.Text)
		return nil
	})
	for i := 0; i < 5; i++ {
		f := policy.NodeFailure{Node: "node-1", Device: fmt.Sprint("d/node-1/gpu-", i), State: policy.Quarantined, Threshold: 4}
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDeviceFailed, f) }, time.Duration(i+1)*time.Minute)
	}
	var st policy.NodeState
	queryThenCancel(t, env, time.Hour, &st)
	env.ExecuteWorkflow(NodeWorkflow, NodeInput{Node: "node-1"})
	if !st.Escalated || len(st.Failed) != 5 || len(texts) != 1 {
		t.Fatalf("state %+v alerts %v", st, texts)
	}
}
