package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// SendCommand delivers an operator command to a device's workflow as an update and returns the
// workflow's answer. A refused command comes back as an error with the reason. With start set,
// a device that has no workflow gets one (update-with-start).
func SendCommand(ctx context.Context, c client.Client, id device.ID, cmd devicemsg.Command, start *DeviceInput) (devicemsg.CommandResult, error) {
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
		return devicemsg.CommandResult{}, fmt.Errorf("%s %s: %w", cmd.Kind, id, err)
	}
	var res devicemsg.CommandResult
	if err := h.Get(ctx, &res); err != nil {
		return devicemsg.CommandResult{}, fmt.Errorf("%s %s: %w", cmd.Kind, id, err)
	}
	return res, nil
}

// DeviceSearchAttributes are the search attributes a device workflow starts with.
func DeviceSearchAttributes(id device.ID, node string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		SearchDeviceID.ValueSet(id.String()),
		SearchDeviceNode.ValueSet(node),
		SearchDeviceDriver.ValueSet(id.Driver),
		SearchDeviceState.ValueSet(string(devicemsg.Healthy)),
	)
}

// QueryDevice asks a device's workflow where the device stands. A worker of a release before
// the `view` query answers only `state`, whose fields the view shares by name: that answer is
// read instead, without the summary and the next step the view adds.
func QueryDevice(ctx context.Context, c client.Client, workflowID, runID string) (devicemsg.DeviceView, error) {
	var v devicemsg.DeviceView
	val, err := c.QueryWorkflow(ctx, workflowID, runID, QueryView)
	if err != nil && unknownQuery(err) {
		val, err = c.QueryWorkflow(ctx, workflowID, runID, QueryState)
	}
	if err != nil {
		return v, fmt.Errorf("query %s: %w", workflowID, err)
	}
	if err := val.Get(&v); err != nil {
		return v, fmt.Errorf("query %s: %w", workflowID, err)
	}
	return v, nil
}

// unknownQuery says whether a query failed because the workflow's code has no handler for it.
func unknownQuery(err error) bool {
	var qf *serviceerror.QueryFailed
	return errors.As(err, &qf) && strings.Contains(qf.Message, "unknown queryType")
}
