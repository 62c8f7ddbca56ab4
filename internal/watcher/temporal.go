package watcher

import (
	"context"
	"fmt"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/workflows"
)

// TemporalSignaler signals a device's workflow, starting it on the device's first non-Healthy report.
type TemporalSignaler struct {
	Client    client.Client
	TaskQueue string
	DryRun    bool
	// Policies picks the policy a new device workflow starts with.
	Policies *policy.Set
}

// Signal uses signal-with-start on the device's business key, so a repeated report never starts a
// second remediation while one runs.
func (s *TemporalSignaler) Signal(ctx context.Context, obs workflows.Observation) error {
	id := obs.Device.WorkflowID()
	opts := client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             s.TaskQueue,
		TypedSearchAttributes: workflows.DeviceSearchAttributes(obs.Device, obs.Node),
	}
	in := workflows.DeviceInput{Device: obs.Device, Node: obs.Node, DryRun: s.DryRun, Policy: s.Policies.For(obs.DeviceClass, obs.Device.Driver)}
	if _, err := s.Client.SignalWithStartWorkflow(ctx, id, workflows.SignalObservation, obs, opts, workflows.DeviceWorkflow, in); err != nil {
		return fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	return nil
}

// RunningDevices lists the devices whose workflows are running, from visibility.
func (s *TemporalSignaler) RunningDevices(ctx context.Context) ([]device.ID, error) {
	var ids []device.ID
	var token []byte
	for {
		resp, err := s.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = 'DeviceWorkflow' AND ExecutionStatus = 'Running'", NextPageToken: token, PageSize: 1000})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			var v string
			if p, ok := e.GetSearchAttributes().GetIndexedFields()["DeviceID"]; ok && converter.GetDefaultDataConverter().FromPayload(p, &v) == nil {
				if id, err := device.ParseID(v); err == nil {
					ids = append(ids, id)
				}
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return ids, nil
		}
	}
}
