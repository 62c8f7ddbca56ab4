package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// registerLeases adds the breaker's handlers for permits leased ahead (see breaker.Lease): the
// `lease` update, and the `pause` update that answers once no worker can spend a leased permit.
// Runs recorded before leases existed saw none of these, and with no lease outstanding a pause
// schedules nothing, so they replay as they were.
func registerLeases(ctx workflow.Context, st *breaker.State, alerts *[]notify.AlertInput) error {
	err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateLease,
		func(ctx workflow.Context, req breaker.LeaseRequest) (breaker.LeaseResult, error) {
			res := st.Lease(req, workflow.Now(ctx))
			if res.Tripped {
				*alerts = append(*alerts, notify.AlertInput{Level: "critical", Text: res.Reason, WorkflowID: api.BreakerWorkflowID})
			}
			return res, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req breaker.LeaseRequest) error {
			if req.Worker == "" {
				return fmt.Errorf("lease: worker is required")
			}
			if req.Claim == "" && !req.Device.Valid() {
				return fmt.Errorf("invalid device %q", req.Device.String())
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("register update %s: %w", api.UpdateLease, err)
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateBreakerPause,
		func(ctx workflow.Context, sig api.BreakerSignal) (breaker.State, error) {
			pause(ctx, st, sig, alerts)
			return *st, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, sig api.BreakerSignal) error {
			if sig.Actor == "" {
				return fmt.Errorf("pause: actor is required")
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("register update %s: %w", api.UpdateBreakerPause, err)
	}
	return nil
}

// pause opens the breaker by hand, by signal or update alike: the alert, then every lease revoked.
func pause(ctx workflow.Context, st *breaker.State, sig api.BreakerSignal, alerts *[]notify.AlertInput) {
	st.Trip(sig.Actor, sig.Reason, workflow.Now(ctx))
	*alerts = append(*alerts, notify.AlertInput{Level: "warning", Text: "circuit breaker opened: " + st.Reason, WorkflowID: api.BreakerWorkflowID})
	revokeLeases(ctx, st)
}

// RevokeWithin bounds how long the breaker waits for a worker to give back its leases; one that
// does not answer is waited out until its leases can no longer be spent.
const RevokeWithin = 2 * time.Second

// revokeLeases takes back every batch a worker may still spend, from each worker on its own task
// queue, at once. Leases a worker did not answer for count as used, and the breaker waits until
// they can no longer be spent: when it returns, no leased permit is spent any more.
func revokeLeases(ctx workflow.Context, st *breaker.State) {
	queues, ids := st.Outstanding(workflow.Now(ctx))
	futures := make([]workflow.Future, len(queues))
	for i, q := range queues {
		rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: q, ScheduleToStartTimeout: RevokeWithin, StartToCloseTimeout: RevokeWithin,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		futures[i] = workflow.ExecuteActivity(rctx, rem.RevokePermits, remediation.RevokeInput{Leases: ids[q]})
	}
	for i, f := range futures {
		var reps []breaker.LeaseReport
		if err := f.Get(ctx, &reps); err != nil {
			workflow.GetLogger(ctx).Warn("worker did not give back its permits; waiting until they run out", "queue", queues[i], "error", err)
			st.Unreachable(ids[queues[i]])
			continue
		}
		for _, r := range reps {
			st.Report(r, workflow.Now(ctx))
		}
	}
	if until := st.SpendableUntil(workflow.Now(ctx)); !until.IsZero() {
		if err := workflow.Sleep(ctx, until.Sub(workflow.Now(ctx))); err != nil {
			workflow.GetLogger(ctx).Warn("wait for unreachable permits cut short", "error", err)
		}
	}
}
