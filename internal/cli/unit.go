package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/workflows"
)

// deciderOf is the device whose workflow decides for a device: the device itself, or, for a form
// of a partitionable GPU, its physical unit (found by the DeviceForms search attribute). A device
// with neither is its own, so the call that follows says it has no workflow.
func (f *clientFlags) deciderOf(c *cobra.Command, g *globals, id device.ID) (device.ID, error) {
	tc, err := f.dial(c, g)
	if err != nil {
		return id, err
	}
	defer tc.Close()
	if _, err := tc.DescribeWorkflowExecution(c.Context(), id.WorkflowID(), ""); err == nil {
		return id, nil
	}
	var unit string
	query := fmt.Sprintf("%s AND DeviceForms = '%s'", workflows.RunningDevicesQuery, id)
	err = eachWorkflow(c.Context(), tc, f.o.Namespace, query, func(e *workflowpb.WorkflowExecutionInfo) {
		if unit == "" {
			unit = e.GetExecution().GetWorkflowId()
		}
	})
	if err != nil || unit == "" {
		return id, nil
	}
	if u, err := device.ParseID(strings.TrimPrefix(unit, "device/")); err == nil {
		return u, nil
	}
	return id, nil
}
