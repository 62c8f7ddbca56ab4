package api

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// SendCommand updates a running workflow, or starts one with the update when told to, and hands
// back the workflow's answer or its refusal.
func TestSendCommand(t *testing.T) {
	cmd := decide.Command{Kind: decide.CmdRelease, Actor: "alice"}
	answer := func(err error) *mocks.WorkflowUpdateHandle {
		h := &mocks.WorkflowUpdateHandle{}
		h.On("Get", mock.Anything, mock.Anything).Return(func(_ context.Context, v any) error {
			if err != nil {
				return err
			}
			*(v.(*decide.CommandResult)) = decide.CommandResult{State: decide.Recovering, Message: "review"}
			return nil
		})
		return h
	}

	c := &mocks.Client{}
	c.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.WorkflowID == testGPU.WorkflowID() && o.UpdateName == "release"
	})).Return(answer(nil), nil).Once()
	res, err := SendCommand(context.Background(), c, testGPU, cmd, nil)
	if err != nil || res.State != decide.Recovering {
		t.Fatalf("update: %+v %v", res, err)
	}

	c = &mocks.Client{}
	c.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).Return(nil)
	c.On("UpdateWithStartWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWithStartWorkflowOptions) bool {
		return o.UpdateOptions.WorkflowID == "" && o.UpdateOptions.UpdateName == "release"
	})).Return(answer(nil), nil).Once()
	if res, err := SendCommand(context.Background(), c, testGPU, cmd, &DeviceInput{Device: testGPU, Node: "n"}); err != nil || res.State != decide.Recovering {
		t.Fatalf("update-with-start: %+v %v", res, err)
	}
	c.AssertExpectations(t)

	c = &mocks.Client{}
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, errors.New("workflow not found")).Once()
	if _, err := SendCommand(context.Background(), c, testGPU, cmd, nil); err == nil || !strings.Contains(err.Error(), "release "+testGPU.String()) {
		t.Fatalf("unreachable workflow: %v", err)
	}
	c = &mocks.Client{}
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(answer(errors.New("refused: not quarantined")), nil).Once()
	if _, err := SendCommand(context.Background(), c, testGPU, cmd, nil); err == nil || !strings.Contains(err.Error(), "refused: not quarantined") {
		t.Fatalf("refused command: %v", err)
	}
}

var testGPU = device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: "gpu-0"}
