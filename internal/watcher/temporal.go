package watcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// SignalTimeout bounds one delivery to a device workflow, the wait for it to take the report in
// included. A delivery that times out is retried; the workflow takes a repeat as a heartbeat.
const SignalTimeout = 15 * time.Second

// TemporalSignaler signals a device's workflow, starting it on the device's first non-Healthy report.
type TemporalSignaler struct {
	Client    client.Client
	TaskQueue string
	DryRun    bool
	// Policies picks the policy a new device workflow starts with.
	Policies *policy.Set
}

// Signal delivers the observation with update-with-start on the device's business key, so a
// repeated report never starts a second remediation while one runs, and waits until the workflow
// has taken it in: Temporal then never holds more undecided reports than the watcher has
// workers (a storm waits in the watcher's queue, where newer reports of a device replace older
// ones), and an operator's command is not queued behind thousands of reports. A workflow whose
// worker predates the update gets the observation as a signal.
func (s *TemporalSignaler) Signal(ctx context.Context, obs api.Observation) error {
	// The SDK retries an unreachable server for as long as the context lets it: bound each
	// delivery, so an outage shows as errors and the watcher's own backoff takes over.
	ctx, cancel := context.WithTimeout(ctx, SignalTimeout)
	defer cancel()
	id := obs.Device.WorkflowID()
	opts := client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                s.TaskQueue,
		TypedSearchAttributes:    api.DeviceSearchAttributes(obs.Device, obs.Node),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
	in := api.DeviceInput{Device: obs.Device, Node: obs.Node, DryRun: s.DryRun, Policy: s.Policies.For(obs.DeviceClass, obs.Device.Driver)}
	op := s.Client.NewWithStartWorkflowOperation(opts, api.DeviceWorkflow, in)
	h, err := s.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{UpdateName: api.UpdateObservation, Args: []any{obs},
			WaitForStage: client.WorkflowUpdateStageCompleted},
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err == nil {
		return nil
	}
	if !unknownUpdate(err) {
		return fmt.Errorf("update-with-start %s: %w", id, err)
	}
	if _, err := s.Client.SignalWithStartWorkflow(ctx, id, api.SignalObservation, obs, opts, api.DeviceWorkflow, in); err != nil {
		return fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	return nil
}

// unknownUpdate reports whether the workflow refused the update for want of a handler (a worker
// from before it existed).
func unknownUpdate(err error) bool {
	return strings.Contains(err.Error(), "unknown update "+api.UpdateObservation)
}

// RunningDevices lists the devices whose workflows are running, from visibility.
func (s *TemporalSignaler) RunningDevices(ctx context.Context) ([]device.ID, error) {
	var ids []device.ID
	var token []byte
	for {
		resp, err := s.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: api.RunningDevicesQuery, NextPageToken: token, PageSize: 1000})
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
