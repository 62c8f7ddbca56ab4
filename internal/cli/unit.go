package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/watcher"
)

// deciderOf is the device whose workflow decides for a device: the device itself while its own
// workflow runs, or else, for a form of a partitionable GPU, its physical unit (found by the
// DeviceForms search attribute). A closed run of the form's own (a standalone run that ended, or
// one from before its GPU's unit was known) never decides while its unit runs. A device with
// neither is its own, so the call that follows says it has no running workflow.
func (f *clientFlags) deciderOf(c *cobra.Command, g *globals, id device.ID) (device.ID, error) {
	tc, err := f.dial(c, g)
	if err != nil {
		return id, err
	}
	defer tc.Close()
	d, err := tc.DescribeWorkflowExecution(c.Context(), id.WorkflowID(), "")
	if err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return id, nil
	}
	var unit string
	query := fmt.Sprintf("%s AND DeviceForms = '%s'", api.RunningDevicesQuery, id)
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

// quarantineStart is the workflow a force-quarantine of id goes to, and how it starts if it is
// not running: the workflow of id's physical unit when id is a form of a partitionable GPU (one
// that runs already, or one started with the unit's devices read from the cluster's
// ResourceSlices), else id's own. A cluster that cannot be read leaves id's own, with a warning:
// a partition is then fenced alone. The input carries no policy: the workflow runs under the
// running DeviceWarden's (the chart's), never one the command line was given; pol only says how
// the driver's devices group into units.
func (f *clientFlags) quarantineStart(c *cobra.Command, g *globals, kf *kubeFlags, id device.ID, pol *policy.Set) (*api.DeviceInput, error) {
	own := &api.DeviceInput{Device: id}
	if id.DevicePlugin() || device.IsUnitKey(id.Device) {
		return own, nil
	}
	decider, err := f.deciderOf(c, g, id)
	if err != nil {
		return nil, err
	}
	if decider != id {
		return &api.DeviceInput{Device: decider}, nil
	}
	unit, node, err := readUnit(c, g, kf, id, pol)
	if err != nil {
		fmt.Fprintf(c.ErrOrStderr(), "warning: %v; if %s is one form of a partitionable GPU, only it is fenced\n", err, id)
		return own, nil
	}
	if !unit.Shared() {
		return own, nil
	}
	fmt.Fprintf(c.OutOrStdout(), "%s is one of %d forms of %s: quarantining them all\n", id, len(unit.Devices), unit.ID)
	return &api.DeviceInput{Device: unit.Device(), Node: node, Unit: &unit}, nil
}

// readUnit reads the device's pool from the cluster and returns its physical unit and node.
func readUnit(c *cobra.Command, g *globals, kf *kubeFlags, id device.ID, pol *policy.Set) (device.Unit, string, error) {
	cs, err := kf.client(g)
	if err != nil {
		return device.Unit{}, "", fmt.Errorf("cannot read the ResourceSlices of %s: %w", id.Driver, err)
	}
	list, err := cs.ResourceV1().ResourceSlices().List(c.Context(), metav1.ListOptions{FieldSelector: "spec.driver=" + id.Driver})
	if err != nil {
		return device.Unit{}, "", fmt.Errorf("cannot read the ResourceSlices of %s: %w", id.Driver, err)
	}
	u, node, ok := watcher.UnitOf(list.Items, id, pol)
	if !ok {
		return device.Unit{}, "", fmt.Errorf("no ResourceSlice publishes %s", id)
	}
	return u, node, nil
}
