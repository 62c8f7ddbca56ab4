package api

// The typed clients of this file reach DeviceWarden's long-lived workflows from activities and
// the app: the circuit breaker (permits, leased ahead in batches, and the refusals it answered),
// the node workflows and the migration limiter.

import (
	"context"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// BreakerClient reaches the breaker workflow with update-with-start, so the first permit request
// also starts the breaker, and every request is answered by the one running instance.
//
// In a storm thousands of devices ask at once, and one workflow takes a bounded number of updates
// (Temporal admits 10 in flight and 2,000 per run by default): once this worker has seen a budget
// refused, it refuses that budget itself for breaker.RefusedFor (breaker.Refusals), with the
// breaker's reason, and hands the devices to the breaker's wait list in one signal per second, so
// a resume wakes them. A device the breaker woke always asks the breaker.
//
// A client with a Worker name leases permits ahead (see permits.go): its devices take them from
// a batch in process, and it asks the breaker only when its batch is empty.
type BreakerClient struct {
	Client client.Client
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
func (b *BreakerClient) Acquire(ctx context.Context, req breaker.PermitRequest) (breaker.PermitResult, error) {
	if res, ok := b.refuseHere(req); ok {
		return res, nil
	}
	var res breaker.PermitResult
	var err error
	if b.Worker != "" && req.Claim == "" && !req.Woken && !breaker.OwnBudget(req.Action) {
		// Resets and reboots are few and slow: each asks the breaker itself, never from a leased batch.
		res, err = b.lease(ctx, req)
	} else {
		res, err = b.acquire(ctx, req)
	}
	if err == nil {
		b.remember(req, res)
	}
	return res, err
}

// refuseHere answers for a breaker this worker just saw refuse the request's budget.
func (b *BreakerClient) refuseHere(req breaker.PermitRequest) (breaker.PermitResult, bool) {
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
func (b *BreakerClient) startFlush() {
	if !b.flushing {
		b.flushing = true
		go b.flush()
	}
}

// remember keeps the breaker's answer (breaker.Refusals.Note).
func (b *BreakerClient) remember(req breaker.PermitRequest, res breaker.PermitResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refused.Note(req, res, time.Now())
}

// flush hands the devices refused here to the breaker's wait list, and reports the permits
// spent and returned here, once a second while there is any (or a batch may still run out).
func (b *BreakerClient) flush() {
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
			if err := b.signal(SignalBreakerWait, waiting); err != nil {
				b.mu.Lock()
				if len(b.pending) < 100000 {
					b.pending = append(b.pending, waiting...)
				}
				b.mu.Unlock()
			}
		}
		if len(reps) > 0 {
			// On failure the permits still count as used until their lease leaves the window.
			if err := b.signal(SignalPermitsReport, reps); err != nil {
				// Sent again first, with their numbers: the breaker applies each once, in order,
				// even when this signal reached it and only its answer failed.
				b.mu.Lock()
				b.returned = append(reps, b.returned...)
				b.mu.Unlock()
			}
		}
	}
}

// Release gives a node's permit back (breaker.PermitRelease); one not released lasts its hold.
func (b *BreakerClient) Release(rel breaker.PermitRelease) error {
	return b.signal(SignalPermitRelease, rel)
}

func (b *BreakerClient) signal(name string, arg any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.Client.SignalWorkflow(ctx, BreakerWorkflowID, "", name, arg)
}

func (b *BreakerClient) acquire(ctx context.Context, req breaker.PermitRequest) (breaker.PermitResult, error) {
	var res breaker.PermitResult
	if err := b.update(ctx, UpdateAcquire, req, &res); err != nil {
		return breaker.PermitResult{}, err
	}
	return res, nil
}

// Configure makes this worker's breaker configuration the breaker's, once, as the worker starts:
// the breaker has one owner at a time (the worker started last), not every permit request.
func (b *BreakerClient) Configure(ctx context.Context, cfg breaker.Config, owner string) error {
	if err := b.update(ctx, UpdateBreakerConfigure, ConfigureBreaker{Config: cfg, Owner: owner}, nil); err != nil {
		return fmt.Errorf("configure breaker: %w", err)
	}
	return nil
}

// Pause opens the breaker by hand and waits for its answer, which comes once no worker can spend
// a permit it leased ahead (the breaker revokes them first).
func (b *BreakerClient) Pause(ctx context.Context, sig BreakerSignal) (breaker.State, error) {
	var st breaker.State
	err := b.update(ctx, UpdateBreakerPause, sig, &st)
	return st, err
}

// Signal sends an operator's resume or pause to the breaker, starting it when it does not run
// yet: a pause must work before the first permit request started the breaker.
func (b *BreakerClient) Signal(ctx context.Context, name string, sig BreakerSignal) error {
	opts := client.StartWorkflowOptions{ID: BreakerWorkflowID, TaskQueue: BreakerTaskQueue}
	if _, err := b.Client.SignalWithStartWorkflow(ctx, BreakerWorkflowID, name, sig, opts, BreakerWorkflow, BreakerInput{}); err != nil {
		return fmt.Errorf("signal breaker: %w", err)
	}
	return nil
}

// State reads the breaker's state.
func (b *BreakerClient) State(ctx context.Context) (breaker.State, error) {
	var st breaker.State
	v, err := b.Client.QueryWorkflow(ctx, BreakerWorkflowID, "", QueryState)
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		return breaker.State{}, fmt.Errorf("query breaker: %w", err)
	}
	return st, nil
}

// update sends one update to the breaker workflow, starting it if it does not run, and waits for
// the answer (decoded into out unless nil).
func (b *BreakerClient) update(ctx context.Context, name string, arg, out any) error {
	start := b.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       BreakerWorkflowID,
		TaskQueue:                BreakerTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, BreakerWorkflow, BreakerInput{})
	h, err := b.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return fmt.Errorf("update-with-start breaker: %w", err)
	}
	if err := h.Get(ctx, out); err != nil {
		return fmt.Errorf("breaker answer: %w", err)
	}
	return nil
}

// NodeClient reaches nodes' workflows with signal-with-start.
type NodeClient struct {
	Client client.Client
}

// DeviceFailed signals the node's workflow, starting it if needed.
func (n *NodeClient) DeviceFailed(ctx context.Context, f escalation.NodeFailure) error {
	id := NodeWorkflowID(f.Node)
	_, err := n.Client.SignalWithStartWorkflow(ctx, id, SignalDeviceFailed, f,
		client.StartWorkflowOptions{ID: id, TaskQueue: TaskQueue,
			TypedSearchAttributes: temporal.NewSearchAttributes(SearchDeviceNode.ValueSet(f.Node))},
		NodeWorkflow, NodeInput{Node: f.Node})
	return err
}

// LimiterClient reaches the migration limiter with signal-with-start.
type LimiterClient struct {
	Client client.Client
}

func (l *LimiterClient) signal(ctx context.Context, name string, arg any) error {
	_, err := l.Client.SignalWithStartWorkflow(ctx, MigrationLimiterID, name, arg,
		client.StartWorkflowOptions{ID: MigrationLimiterID, TaskQueue: TaskQueue},
		MigrationLimiterWorkflow, LimiterInput{})
	if err != nil {
		return fmt.Errorf("signal migration limiter (%s): %w", name, err)
	}
	return nil
}

// Acquire queues a migration for a slot.
func (l *LimiterClient) Acquire(ctx context.Context, req migrationplan.SlotRequest) error {
	return l.signal(ctx, SignalSlotAcquire, req)
}

// Release frees a migration's slot.
func (l *LimiterClient) Release(ctx context.Context, id string) error {
	return l.signal(ctx, SignalSlotRelease, id)
}
