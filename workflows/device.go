package workflows

import (
	"fmt"
	"strconv"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/internal/device"
)

// Actor is recorded on decisions DeviceWarden makes by itself.
const Actor = "devicewarden"

// QuarantineLease is how long an automatic quarantine lasts before it must be re-evaluated.
const QuarantineLease = 24 * time.Hour

var a *activities.Activities

// DeviceWorkflow is the long-lived entity workflow for one device (ID "device/<driver>/<pool>/<device>").
// It receives observations by signal and turns them into quarantine decisions.
func DeviceWorkflow(ctx workflow.Context, in DeviceInput) error {
	st := in.State
	if st == nil {
		st = &DeviceState{Device: in.Device, Node: in.Node, State: StateHealthy, Health: device.Healthy}
	}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (DeviceState, error) { return *st, nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    200 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
		},
	})
	obsCh := workflow.GetSignalChannel(ctx, SignalObservation)
	for {
		var obs Observation
		obsCh.Receive(ctx, &obs)
		if err := handleObservation(ctx, in, st, obs); err != nil {
			return err
		}
		// Drain what is already buffered before continuing as new, so no signal is lost.
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() && obsCh.Len() == 0 {
			next := in
			next.State = st
			return workflow.NewContinueAsNewError(ctx, DeviceWorkflow, next)
		}
	}
}

func handleObservation(ctx workflow.Context, in DeviceInput, st *DeviceState, obs Observation) error {
	if !newer(obs, st) {
		st.Ignored++
		return nil
	}
	st.Health, st.Message, st.StatusVersion, st.ObservedAt, st.Reporters = obs.Health, obs.Message, obs.StatusVersion, obs.ObservedAt, obs.Reporters
	if obs.Node != "" {
		st.Node = obs.Node
	}
	if obs.Health != device.Unhealthy || st.State == StateQuarantined {
		return nil
	}
	now := workflow.Now(ctx)
	reason := "device reported Unhealthy"
	if obs.Message != "" {
		reason += ": " + obs.Message
	}
	effect := resourcev1.DeviceTaintEffectNoSchedule
	if in.DryRun {
		effect = resourcev1.DeviceTaintEffectNone
	}
	qin := activities.QuarantineInput{
		Device: st.Device, Reason: reason, Actor: Actor, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID,
		ExpiresAt: now.Add(QuarantineLease), Effect: effect,
	}
	var res activities.QuarantineResult
	if err := workflow.ExecuteActivity(ctx, a.Quarantine, qin).Get(ctx, &res); err != nil {
		return fmt.Errorf("quarantine %s: %w", st.Device, err)
	}
	st.Quarantine = &QuarantineRecord{RuleName: res.RuleName, Reason: reason, Actor: Actor, CreatedAt: now, ExpiresAt: qin.ExpiresAt}
	transition(ctx, st, StateQuarantined, reason)
	return nil
}

func transition(ctx workflow.Context, st *DeviceState, to, reason string) {
	st.Transitions = append(st.Transitions, Transition{From: st.State, To: to, Reason: reason, At: workflow.Now(ctx)})
	st.State = to
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchDeviceState.ValueSet(to)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attribute failed", "error", err)
	}
}

// newer reports whether obs should change the state: not a duplicate, not older than what was seen.
// Pod resourceVersions are compared as numbers when both are numeric (etcd revisions); otherwise
// the observation time decides.
func newer(obs Observation, st *DeviceState) bool {
	if st.StatusVersion == "" {
		return true
	}
	if obs.StatusVersion == st.StatusVersion {
		return false
	}
	nv, err1 := strconv.ParseUint(obs.StatusVersion, 10, 64)
	ov, err2 := strconv.ParseUint(st.StatusVersion, 10, 64)
	if err1 == nil && err2 == nil {
		return nv > ov
	}
	return obs.ObservedAt.After(st.ObservedAt)
}
