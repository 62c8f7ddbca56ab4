package api

// The typed clients of this file reach DeviceWarden's long-lived workflows from activities and
// the app: the circuit breaker, the node workflows and the migration limiter.

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// BreakerClient reaches the breaker workflow with update-with-start, so the first request also
// starts the breaker, and every request is answered by the one running instance. It is the thin
// client of the contract; a worker's permits, leased ahead in batches, are worker/permits'.
type BreakerClient struct {
	Client client.Client
}

// Acquire asks the breaker for one permit and waits for its answer.
func (b *BreakerClient) Acquire(ctx context.Context, req breaker.PermitRequest) (breaker.PermitResult, error) {
	var res breaker.PermitResult
	if err := b.Update(ctx, UpdateAcquire, req, &res); err != nil {
		return breaker.PermitResult{}, err
	}
	return res, nil
}

// Release gives a node's permit back (breaker.PermitRelease); one not released lasts its hold.
func (b *BreakerClient) Release(rel breaker.PermitRelease) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.Client.SignalWorkflow(ctx, BreakerWorkflowID, "", SignalPermitRelease, rel)
}

// Configure makes this worker's breaker configuration the breaker's, once, as the worker starts:
// the breaker has one owner at a time (the worker started last), not every permit request.
func (b *BreakerClient) Configure(ctx context.Context, cfg breaker.Config, owner string) error {
	if err := b.Update(ctx, UpdateBreakerConfigure, ConfigureBreaker{Config: cfg, Owner: owner}, nil); err != nil {
		return fmt.Errorf("configure breaker: %w", err)
	}
	return nil
}

// Pause opens the breaker by hand and waits for its answer, which comes once no worker can spend
// a permit it leased ahead (the breaker revokes them first).
func (b *BreakerClient) Pause(ctx context.Context, sig BreakerSignal) (breaker.State, error) {
	var st breaker.State
	err := b.Update(ctx, UpdateBreakerPause, sig, &st)
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

// Update sends one update to the breaker workflow, starting it if it does not run, and waits for
// the answer (decoded into out unless nil).
func (b *BreakerClient) Update(ctx context.Context, name string, arg, out any) error {
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
