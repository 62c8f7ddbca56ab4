// Package worker registers DeviceWarden's workflows and activities on their task queue.
package worker

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/workflows"
)

// New builds a worker for the device task queue. The caller starts and stops it.
func New(c client.Client, acts *activities.Activities) sdkworker.Worker {
	w := sdkworker.New(c, workflows.TaskQueue, sdkworker.Options{
		MaxConcurrentActivityExecutionSize:     64,
		MaxConcurrentWorkflowTaskExecutionSize: 64,
	})
	w.RegisterWorkflow(workflows.DeviceWorkflow)
	w.RegisterWorkflow(workflows.BreakerWorkflow)
	w.RegisterWorkflow(workflows.NodeWorkflow)
	w.RegisterActivity(acts)
	return w
}

// RegisterSearchAttributes adds DeviceWarden's Keyword search attributes to the namespace if missing.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	op := c.OperatorService()
	have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range workflows.SearchAttributeNames {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := op.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return nil
}
