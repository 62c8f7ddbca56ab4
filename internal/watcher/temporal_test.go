package watcher

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/mocks"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// The signaler delivers with update-with-start and waits for the answer; a worker without the
// update gets a signal-with-start; any other failure is an error naming the workflow.
func TestTemporalSignalerDelivery(t *testing.T) {
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	obs := api.Observation{Device: id, Node: "node-1", Health: device.Unhealthy}
	handle := func(err error) *mocks.WorkflowUpdateHandle {
		h := &mocks.WorkflowUpdateHandle{}
		h.On("Get", mock.Anything, mock.Anything).Return(err)
		return h
	}
	newSignaler := func(updateErr, getErr, signalErr error) (*TemporalSignaler, *mocks.Client) {
		c := &mocks.Client{}
		c.On("NewWithStartWorkflowOperation", mock.MatchedBy(func(o client.StartWorkflowOptions) bool { return o.ID == id.WorkflowID() }),
			mock.Anything, mock.Anything).Return(nil)
		c.On("UpdateWithStartWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWithStartWorkflowOptions) bool {
			return o.UpdateOptions.UpdateName == api.UpdateObservation
		})).Return(handle(getErr), updateErr)
		c.On("SignalWithStartWorkflow", mock.Anything, id.WorkflowID(), api.SignalObservation, obs, mock.Anything, mock.Anything, mock.Anything).
			Return(nil, signalErr)
		return &TemporalSignaler{Client: c, TaskQueue: "q", Policies: policy.DefaultSet()}, c
	}
	s, c := newSignaler(nil, nil, nil)
	if err := s.Signal(context.Background(), obs); err != nil {
		t.Fatal(err)
	}
	c.AssertNotCalled(t, "SignalWithStartWorkflow", mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything)

	s, c = newSignaler(nil, errors.New(`unknown update `+api.UpdateObservation), nil)
	if err := s.Signal(context.Background(), obs); err != nil {
		t.Fatal(err)
	}
	c.AssertCalled(t, "SignalWithStartWorkflow", mock.Anything, id.WorkflowID(), api.SignalObservation, obs, mock.Anything, mock.Anything, mock.Anything)

	s, _ = newSignaler(errors.New(`unknown update `+api.UpdateObservation), nil, errors.New("frontend down"))
	if err := s.Signal(context.Background(), obs); err == nil || !strings.Contains(err.Error(), "signal-with-start "+id.WorkflowID()) {
		t.Fatalf("failed fallback: %v", err)
	}
	s, c = newSignaler(errors.New("deadline exceeded"), nil, nil)
	if err := s.Signal(context.Background(), obs); err == nil || !strings.Contains(err.Error(), "update-with-start "+id.WorkflowID()) {
		t.Fatalf("failed update: %v", err)
	}
	c.AssertNotCalled(t, "SignalWithStartWorkflow", mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything)
}

// RunningDevices reads every page of visibility and skips what does not name a device.
func TestTemporalSignalerRunningDevices(t *testing.T) {
	attr := func(v string) *commonpb.SearchAttributes {
		p, _ := converter.GetDefaultDataConverter().ToPayload(v)
		return &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{"DeviceID": p}}
	}
	c := &mocks.Client{}
	c.On("ListWorkflow", mock.Anything, mock.MatchedBy(func(r *workflowservice.ListWorkflowExecutionsRequest) bool { return len(r.NextPageToken) == 0 })).
		Return(&workflowservice.ListWorkflowExecutionsResponse{NextPageToken: []byte("p2"), Executions: []*workflowpb.WorkflowExecutionInfo{
			{SearchAttributes: attr(drv + "/node-1/gpu-0")}, {SearchAttributes: attr("not a device")}, {}}}, nil).Once()
	c.On("ListWorkflow", mock.Anything, mock.MatchedBy(func(r *workflowservice.ListWorkflowExecutionsRequest) bool { return string(r.NextPageToken) == "p2" })).
		Return(&workflowservice.ListWorkflowExecutionsResponse{Executions: []*workflowpb.WorkflowExecutionInfo{{SearchAttributes: attr(drv + "/node-2/gpu-1")}}}, nil).Once()
	s := &TemporalSignaler{Client: c}
	ids, err := s.RunningDevices(context.Background())
	if err != nil || len(ids) != 2 || ids[0].Pool != "node-1" || ids[1].Pool != "node-2" {
		t.Fatalf("devices %v (%v)", ids, err)
	}
	c = &mocks.Client{}
	c.On("ListWorkflow", mock.Anything, mock.Anything).Return(nil, errors.New("visibility down"))
	if _, err := (&TemporalSignaler{Client: c}).RunningDevices(context.Background()); err == nil {
		t.Fatal("a visibility error was swallowed")
	}
}
