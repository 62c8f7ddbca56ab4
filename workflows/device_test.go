package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/internal/device"
)

var gpu0 = device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: "gpu-0"}

func obs(h device.Health, version string) Observation {
	return Observation{Device: gpu0, Node: "node-1", Health: h, StatusVersion: version, ObservedAt: time.Unix(1700000000, 0)}
}

// run starts the workflow, delivers the signals one by one, then queries the state.
func run(t *testing.T, signals ...Observation) (DeviceState, *testsuite.TestWorkflowEnvironment) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	env.OnActivity("Quarantine", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.QuarantineInput) (activities.QuarantineResult, error) {
			return activities.QuarantineResult{RuleName: in.Device.TaintRuleName(), Created: true}, nil
		})
	var got DeviceState
	for i, o := range signals {
		o := o
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalObservation, o) }, time.Duration(i+1)*time.Second)
	}
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryState)
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		if err := v.Get(&got); err != nil {
			t.Fatalf("decode state: %v", err)
		}
		env.CancelWorkflow()
	}, time.Duration(len(signals)+1)*time.Second)
	env.ExecuteWorkflow(DeviceWorkflow, DeviceInput{Device: gpu0, Node: "node-1"})
	return got, env
}

func TestDeviceWorkflow(t *testing.T) {
	tests := []struct {
		name        string
		signals     []Observation
		wantState   string
		wantCalls   int
		wantIgnored int
	}{
		{name: "healthy stays healthy", signals: []Observation{obs(device.Healthy, "10")}, wantState: StateHealthy},
		{name: "unhealthy quarantines", signals: []Observation{obs(device.Unhealthy, "10")}, wantState: StateQuarantined, wantCalls: 1},
		{name: "duplicate unhealthy quarantines once", signals: []Observation{obs(device.Unhealthy, "10"), obs(device.Unhealthy, "10")}, wantState: StateQuarantined, wantCalls: 1, wantIgnored: 1},
		{name: "repeated unhealthy with new version quarantines once", signals: []Observation{obs(device.Unhealthy, "10"), obs(device.Unhealthy, "11")}, wantState: StateQuarantined, wantCalls: 1},
		{name: "older unhealthy after healthy is ignored", signals: []Observation{obs(device.Healthy, "20"), obs(device.Unhealthy, "19")}, wantState: StateHealthy, wantIgnored: 1},
		{name: "unknown does not quarantine", signals: []Observation{obs(device.Unknown, "10")}, wantState: StateHealthy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, env := run(t, tt.signals...)
			if got.State != tt.wantState {
				t.Fatalf("state = %s, want %s", got.State, tt.wantState)
			}
			env.AssertNumberOfCalls(t, "Quarantine", tt.wantCalls)
			if got.Ignored != tt.wantIgnored {
				t.Fatalf("ignored = %d, want %d", got.Ignored, tt.wantIgnored)
			}
			if tt.wantState == StateQuarantined {
				q := got.Quarantine
				if q == nil || q.Actor != Actor || q.RuleName != gpu0.TaintRuleName() || !q.ExpiresAt.After(q.CreatedAt) {
					t.Fatalf("bad quarantine record %+v", q)
				}
				if len(got.Transitions) != 1 || got.Transitions[0].To != StateQuarantined {
					t.Fatalf("transitions = %+v", got.Transitions)
				}
			}
		})
	}
}
