package workflows

import (
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// BreakerWorkflow owns the fleet-wide circuit breaker (ID BreakerWorkflowID). Device workflows ask
// it for permits through the `acquire` update; a workflow runs one handler at a time, so no two
// devices can slip past the cap together. Once open it stays open until a `resume` signal.
func BreakerWorkflow(ctx workflow.Context, in api.BreakerInput) error {
	st := in.State
	if st == nil {
		st = &breaker.State{Config: breaker.DefaultConfig()}
	}
	// Runs recorded before restrictions had their own budget replay with one budget.
	if workflow.GetVersion(ctx, "separate-budgets", workflow.DefaultVersion, 1) >= 1 {
		st.SeparateBudgets = true
	}
	// Runs recorded before waiting devices were woken replay with 30 s polling and per-request config.
	if workflow.GetVersion(ctx, "wake-waiting", workflow.DefaultVersion, 1) >= 1 {
		st.WakeWaiting = true
		if err := registerConfigure(ctx, st); err != nil {
			return err
		}
	}
	// Runs recorded before an open breaker denied repeats of granted actions replay granting them.
	if workflow.GetVersion(ctx, "open-denies-all", workflow.DefaultVersion, 1) >= 1 {
		st.OpenDeniesAll = true
	} else {
		ctx = suggestionOnly(ctx) // open-denies-all came after the history bound: a run without it predates both
	}
	// Runs recorded before a spent permit kept its own action record it under the lease's.
	if workflow.GetVersion(ctx, "spent-own-action", workflow.DefaultVersion, 1) >= 1 {
		st.SpendsOwnAction = true
	}
	// Runs recorded before a renewed node permit covered its step keep the first expiry.
	if workflow.GetVersion(ctx, "renew-holds", workflow.DefaultVersion, 1) >= 1 {
		st.RenewsHolds = true
	}
	// Runs recorded before resets were counted at a time count them per window, with no brake.
	if workflow.GetVersion(ctx, "resets-at-a-time", workflow.DefaultVersion, 1) >= 1 {
		st.ResetsAtATime = true
	}
	// Runs recorded before a reset's end woke the devices refused one leave them to ask again.
	if workflow.GetVersion(ctx, "reset-wake", workflow.DefaultVersion, 1) >= 1 {
		st.WakesResets = true
	}
	// Runs recorded before the brake counted devices count failed resets, and forget lapsed permits.
	if workflow.GetVersion(ctx, "device-brake", workflow.DefaultVersion, 1) >= 1 {
		st.DeviceBrake = true
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryState, func() (breaker.State, error) { return *st, nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	var alerts []notify.AlertInput
	err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateAcquire,
		func(ctx workflow.Context, req breaker.PermitRequest) (breaker.PermitResult, error) {
			res := st.Acquire(req, workflow.Now(ctx))
			if res.Tripped {
				alerts = append(alerts, notify.AlertInput{Level: "critical", Text: res.Reason, WorkflowID: api.BreakerWorkflowID})
			}
			return res, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req breaker.PermitRequest) error {
			if req.Claim == "" && !req.Device.Valid() {
				return fmt.Errorf("invalid device %q", req.Device.String())
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("register update: %w", err)
	}
	if err := registerLeases(ctx, st, &alerts); err != nil {
		return err
	}
	reportCh := workflow.GetSignalChannel(ctx, api.SignalPermitsReport)
	resumeCh := workflow.GetSignalChannel(ctx, api.SignalBreakerResume)
	pauseCh := workflow.GetSignalChannel(ctx, api.SignalBreakerPause)
	waitCh := workflow.GetSignalChannel(ctx, api.SignalBreakerWait)
	releaseCh := workflow.GetSignalChannel(ctx, api.SignalPermitRelease)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}})
	for {
		if err := workflow.Await(ctx, func() bool {
			return len(alerts) > 0 || resumeCh.Len() > 0 || pauseCh.Len() > 0 || waitCh.Len() > 0 || reportCh.Len() > 0 || releaseCh.Len() > 0 || historyFull(ctx)
		}); err != nil {
			return err
		}
		for reportCh.Len() > 0 {
			var reps []breaker.LeaseReport
			reportCh.Receive(ctx, &reps)
			for _, r := range reps {
				st.Report(r, workflow.Now(ctx))
			}
		}
		for releaseCh.Len() > 0 {
			var rel breaker.PermitRelease
			releaseCh.Receive(ctx, &rel)
			if held := st.ResetEnded(rel, workflow.Now(ctx)); held != "" {
				alerts = append(alerts, notify.AlertInput{Level: "critical", Text: held, WorkflowID: api.BreakerWorkflowID})
			}
			if !rel.Failed {
				// A reset that ended well lets the next device refused one go at once; after a
				// failed one (a reset tool that may be broken) the next asks on its own timer.
				wake(ctx, st.WakeResets())
			}
		}
		for waitCh.Len() > 0 {
			var devices []string
			waitCh.Receive(ctx, &devices)
			st.AddWaiting(devices)
		}
		for _, sig := range operatorSignals(ctx, resumeCh, pauseCh) {
			if sig.resume {
				st.Resume(sig.Actor, workflow.Now(ctx))
				alerts = append(alerts, notify.AlertInput{Level: "info", Text: "circuit breaker resumed by " + sig.Actor, WorkflowID: api.BreakerWorkflowID})
				wakeWaiting(ctx, st)
				continue
			}
			pause(ctx, st, sig.BreakerSignal, &alerts)
		}
		for len(alerts) > 0 {
			al := alerts[0]
			alerts = alerts[1:]
			if err := workflow.ExecuteActivity(actx, rem.Alert, al).Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Warn("alert not delivered", "error", err)
			}
		}
		if historyFull(ctx) {
			if err := handlersDone(ctx); err != nil {
				return err
			}
			if st.WakeWaiting && (resumeCh.Len() > 0 || pauseCh.Len() > 0 || waitCh.Len() > 0 || reportCh.Len() > 0 || releaseCh.Len() > 0 || len(alerts) > 0) {
				continue // a signal that came while handlers finished is taken before moving on
			}
			return continueAsNew(ctx, BreakerWorkflow, api.BreakerInput{State: st})
		}
	}
}

// registerConfigure lets the breaker's one owner set its configuration.
func registerConfigure(ctx workflow.Context, st *breaker.State) error {
	err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateBreakerConfigure,
		func(ctx workflow.Context, c api.ConfigureBreaker) (breaker.State, error) {
			return *st, st.Configure(c.Config, c.Owner)
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, c api.ConfigureBreaker) error {
			if c.Owner == "" {
				return fmt.Errorf("configure: owner is required")
			}
			return c.Config.Validate()
		}})
	if err != nil {
		return fmt.Errorf("register update %s: %w", api.UpdateBreakerConfigure, err)
	}
	return nil
}

// wakeWaiting signals the devices the breaker denied that it may now grant again; a device that
// has ended since is skipped.
func wakeWaiting(ctx workflow.Context, st *breaker.State) { wake(ctx, st.Wake()) }

// wake signals the devices of keys that the breaker may grant them now.
func wake(ctx workflow.Context, keys []string) {
	var futures []workflow.Future
	for _, key := range keys {
		id, err := device.ParseID(key)
		if err != nil {
			continue
		}
		futures = append(futures, workflow.SignalExternalWorkflow(ctx, id.WorkflowID(), "", api.SignalBreakerWake, nil))
	}
	for _, f := range futures {
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Info("waiting device not woken", "error", err)
		}
	}
}

type breakerSignal struct {
	api.BreakerSignal
	resume bool
}

// operatorSignals takes the pending resume and pause signals: resumes first as before, unless every
// one says when it was sent; then in that order, so a pause followed at once by a resume leaves
// the breaker closed.
func operatorSignals(ctx workflow.Context, resumeCh, pauseCh workflow.ReceiveChannel) []breakerSignal {
	var sigs []breakerSignal
	for _, c := range []struct {
		ch     workflow.ReceiveChannel
		resume bool
	}{{resumeCh, true}, {pauseCh, false}} {
		for c.ch.Len() > 0 {
			var s api.BreakerSignal
			c.ch.Receive(ctx, &s)
			sigs = append(sigs, breakerSignal{BreakerSignal: s, resume: c.resume})
		}
	}
	for _, s := range sigs {
		if s.At.IsZero() {
			return sigs
		}
	}
	sort.SliceStable(sigs, func(i, j int) bool { return sigs[i].At.Before(sigs[j].At) })
	return sigs
}
