package permits

// The permit cache of one worker process: the budgets it saw refused, answered here a while, and
// the permits it leased ahead in batches (leases.go). It serves the worker's activities; callers
// outside the worker reach the breaker through api.BreakerClient.

import (
	"context"
	"sync"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
)

// Client is a worker's permit cache in front of the breaker workflow (api.BreakerClient): every
// request is answered by the one running breaker.
//
// In a storm thousands of devices ask at once, and one workflow takes a bounded number of updates
// (Temporal admits 10 in flight and 2,000 per run by default): once this worker has seen a budget
// refused, it refuses that budget itself for breaker.RefusedFor (breaker.Refusals), with the
// breaker's reason, and hands the devices to the breaker's wait list in one signal per second, so
// a resume wakes them. A device the breaker woke always asks the breaker.
//
// A client with a Worker name leases permits ahead (see permits.go): its devices take them from
// a batch in process, and it asks the breaker only when its batch is empty.
type Client struct {
	// BreakerClient answers what this cache does not: pauses, state, configuration.
	api.BreakerClient
	// Worker names this worker process to the breaker; empty: ask for every permit.
	Worker string
	// Queue is the task queue where this worker answers the breaker's revocations.
	Queue string

	mu       sync.Mutex
	refused  breaker.Refusals // the budgets this worker saw refused, answered here a while
	pending  []string         // devices refused here, not yet on the breaker's wait list
	flushing bool

	batches  map[string]*batch        // budget -> the lease spent from
	asking   map[string]chan struct{} // budget -> closed when the request in flight is answered
	spent    []spentPermit            // spent here, not yet reported
	returned []breaker.LeaseReport    // batches given up, not yet reported
	granted  map[string]time.Time     // device|action -> granted here (repeats in the window)
	revoked  map[int64]time.Time      // lease -> when the breaker revoked it (a late answer is refused)
	seq      int64                    // the last report's number (policy.LeaseReport.Seq)
}

// Acquire asks the breaker for a permit and waits for its answer.
func (b *Client) Acquire(ctx context.Context, req breaker.PermitRequest) (breaker.PermitResult, error) {
	if res, ok := b.refuseHere(req); ok {
		return res, nil
	}
	var res breaker.PermitResult
	var err error
	if b.Worker != "" && req.Claim == "" && !req.Woken && !breaker.OwnBudget(req.Action) {
		// Resets and reboots are few and slow: each asks the breaker itself, never from a leased batch.
		res, err = b.lease(ctx, req)
	} else {
		res, err = b.BreakerClient.Acquire(ctx, req)
	}
	if err == nil {
		b.remember(req, res)
	}
	return res, err
}

// refuseHere answers for a breaker this worker just saw refuse the request's budget.
func (b *Client) refuseHere(req breaker.PermitRequest) (breaker.PermitResult, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res, ok := b.refused.Answer(req, time.Now())
	if !ok || req.Claim != "" {
		return res, ok // claims look again on their own timer
	}
	if len(b.pending) < 100000 {
		b.pending = append(b.pending, req.Device.String())
	}
	b.startFlush()
	return res, true
}

// startFlush starts the reporter unless it runs. Callers hold b.mu.
func (b *Client) startFlush() {
	if !b.flushing {
		b.flushing = true
		go b.flush()
	}
}

// remember keeps the breaker's answer (breaker.Refusals.Note).
func (b *Client) remember(req breaker.PermitRequest, res breaker.PermitResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refused.Note(req, res, time.Now())
}

// flush hands the devices refused here to the breaker's wait list, and reports the permits
// spent and returned here, once a second while there is any (or a batch may still run out).
func (b *Client) flush() {
	for {
		time.Sleep(time.Second)
		b.mu.Lock()
		waiting := b.pending
		b.pending = nil
		reps := b.reports(time.Now())
		if len(waiting) == 0 && len(reps) == 0 && len(b.batches) == 0 {
			b.flushing = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if len(waiting) > 0 {
			// On failure the devices still retry on their fallback timer; nothing is lost but the wake-up.
			if err := b.signal(api.SignalBreakerWait, waiting); err != nil {
				b.mu.Lock()
				if len(b.pending) < 100000 {
					b.pending = append(b.pending, waiting...)
				}
				b.mu.Unlock()
			}
		}
		if len(reps) > 0 {
			// On failure the permits still count as used until their lease leaves the window.
			if err := b.signal(api.SignalPermitsReport, reps); err != nil {
				// Sent again first, with their numbers: the breaker applies each once, in order,
				// even when this signal reached it and only its answer failed.
				b.mu.Lock()
				b.returned = append(reps, b.returned...)
				b.mu.Unlock()
			}
		}
	}
}

// signal sends the breaker one signal, bounded by its own timeout (the flusher has no context).
func (b *Client) signal(name string, arg any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.Client.SignalWorkflow(ctx, api.BreakerWorkflowID, "", name, arg)
}
