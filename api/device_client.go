package api

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// SendCommand delivers an operator command to a device's workflow as an update and returns the
// workflow's answer. A refused command comes back as an error with the reason. With start set,
// a device that has no workflow gets one (update-with-start).
func SendCommand(ctx context.Context, c client.Client, id device.ID, cmd decide.Command, start *DeviceInput) (decide.CommandResult, error) {
	opts := client.UpdateWorkflowOptions{WorkflowID: id.WorkflowID(), UpdateName: string(cmd.Kind), Args: []any{cmd},
		WaitForStage: client.WorkflowUpdateStageCompleted}
	var h client.WorkflowUpdateHandle
	var err error
	if start != nil {
		op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
			ID: id.WorkflowID(), TaskQueue: TaskQueue, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
			TypedSearchAttributes: DeviceSearchAttributes(id, start.Node),
		}, DeviceWorkflow, *start)
		opts.WorkflowID = ""
		h, err = c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: op, UpdateOptions: opts})
	} else {
		h, err = c.UpdateWorkflow(ctx, opts)
	}
	if err != nil {
		return decide.CommandResult{}, fmt.Errorf("%s %s: %w", cmd.Kind, id, err)
	}
	var res decide.CommandResult
	if err := h.Get(ctx, &res); err != nil {
		return decide.CommandResult{}, fmt.Errorf("%s %s: %w", cmd.Kind, id, err)
	}
	return res, nil
}

// DeviceSearchAttributes are the search attributes a device workflow starts with.
func DeviceSearchAttributes(id device.ID, node string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		SearchDeviceID.ValueSet(id.String()),
		SearchDeviceNode.ValueSet(node),
		SearchDeviceDriver.ValueSet(id.Driver),
		SearchDeviceState.ValueSet(string(decide.Healthy)),
	)
}
