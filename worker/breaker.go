package worker

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/workflows"
)

// BreakerClient reaches the breaker workflow with update-with-start, so the first permit request
// also starts the breaker, and every request is answered by the one running instance.
type BreakerClient struct {
	Client client.Client
}

// Acquire asks the breaker for a permit and waits for its answer.
func (b *BreakerClient) Acquire(ctx context.Context, req policy.PermitRequest) (policy.PermitResult, error) {
	start := b.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       workflows.BreakerWorkflowID,
		TaskQueue:                workflows.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, workflows.BreakerWorkflow, workflows.BreakerInput{})
	h, err := b.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: workflows.UpdateAcquire, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return policy.PermitResult{}, fmt.Errorf("update-with-start breaker: %w", err)
	}
	var res policy.PermitResult
	if err := h.Get(ctx, &res); err != nil {
		return policy.PermitResult{}, fmt.Errorf("breaker answer: %w", err)
	}
	return res, nil
}

// Configure makes this worker's breaker configuration the breaker's, once, as the worker starts:
// the breaker has one owner at a time (the worker started last), not every permit request.
func (b *BreakerClient) Configure(ctx context.Context, cfg policy.BreakerConfig, owner string) error {
	start := b.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       workflows.BreakerWorkflowID,
		TaskQueue:                workflows.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, workflows.BreakerWorkflow, workflows.BreakerInput{})
	h, err := b.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: workflows.UpdateBreakerConfigure, Args: []any{workflows.ConfigureBreaker{Config: cfg, Owner: owner}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("configure breaker: %w", err)
	}
	return nil
}

// NodeClient reaches nodes' workflows with signal-with-start.
type NodeClient struct {
	Client client.Client
}

// DeviceFailed signals the node's workflow, starting it if needed.
func (n *NodeClient) DeviceFailed(ctx context.Context, f policy.NodeFailure) error {
	id := workflows.NodeWorkflowID(f.Node)
	_, err := n.Client.SignalWithStartWorkflow(ctx, id, workflows.SignalDeviceFailed, f,
		client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue,
			TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SearchDeviceNode.ValueSet(f.Node))},
		workflows.NodeWorkflow, workflows.NodeInput{Node: f.Node})
	return err
}
