package bench

import (
	"context"
	"fmt"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
)

// check holds a decided storm to what the product promises, so a run that breaks one fails:
// the breaker caps the automatic actions at its count; each device of an Unhealthy storm is acted
// on or held by the breaker; and only the storm's devices have workflows (a healthy device costs
// Temporal nothing).
func (r stormResult) check(ctx context.Context, tc client.Client, storm []benchTarget, reserveNode string, health device.Health) error {
	capCount := breaker.DefaultConfig().MaxCount
	if acted := r.quarantined + r.restricted; acted > capCount {
		return fmt.Errorf("%d automatic actions under a breaker of %d", acted, capCount)
	}
	if decided := r.quarantined + r.restricted + r.held; health == device.Unhealthy && decided != len(storm) {
		return fmt.Errorf("%d of the storm's %d devices acted on or held by the breaker", decided, len(storm))
	}
	n, err := deviceWorkflows(ctx, tc, reserveNode)
	if err != nil {
		return err
	}
	if n != len(storm) {
		return fmt.Errorf("%d device workflows for a storm of %d devices: a healthy device has one", n, len(storm))
	}
	return nil
}

// deviceWorkflows counts the device workflows of the fleet, the reserve node's left out.
func deviceWorkflows(ctx context.Context, tc client.Client, reserveNode string) (int, error) {
	resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = 'DeviceWorkflow' AND DeviceNode != '%s'", reserveNode)})
	if err != nil {
		return 0, fmt.Errorf("count device workflows: %w", err)
	}
	return int(resp.GetCount()), nil
}
