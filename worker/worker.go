// Package worker registers DeviceWarden's workflows and activities on their task queue.
package worker

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/worker/permits"
	"github.com/devicewarden/devicewarden/workflows"
)

// Workers are DeviceWarden's two workers: one for the device task queue, and one of its own for
// the breaker. A device workflow keeps its workflow-task slot while its permit request (a local
// activity) waits for the breaker; sharing slots, 64 devices asking at once left none for the
// breaker's own workflow task, and every request waited for its timeout.
//
// A worker that leases permits ahead has a third, on a task queue of its own, where the breaker
// takes back its leases when paused.
type Workers struct {
	Devices, Breaker sdkworker.Worker
	Permits          sdkworker.Worker
}

// SetCacheSize bounds how many workflows this process's workers keep in memory between workflow
// tasks (the SDK's sticky cache: one per process, 10,000 by default). A workflow that fell out of
// it is replayed from its history on its next task: memory traded for CPU. Call it before New.
func SetCacheSize(n int) { sdkworker.SetStickyWorkflowCacheSize(n) }

// New builds the workers. The caller starts and stops them.
func New(c client.Client, acts *Activities) *Workers {
	w := sdkworker.New(c, api.TaskQueue, sdkworker.Options{
		MaxConcurrentActivityExecutionSize:     64,
		MaxConcurrentWorkflowTaskExecutionSize: 64,
	})
	// Every workflow type, the breaker included: breaker runs started on this queue before it had its own.
	for name, fn := range workflows.All {
		w.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name})
	}
	acts.register(w)
	b := sdkworker.New(c, api.BreakerTaskQueue, sdkworker.Options{
		MaxConcurrentActivityExecutionSize:     8,
		MaxConcurrentWorkflowTaskExecutionSize: 8,
	})
	b.RegisterWorkflow(workflows.BreakerWorkflow)
	acts.register(b)
	ws := &Workers{Devices: w, Breaker: b}
	if bc, ok := acts.Remediation.Breaker.(*permits.Client); ok && bc.Queue != "" {
		ws.Permits = sdkworker.New(c, bc.Queue, sdkworker.Options{MaxConcurrentActivityExecutionSize: 2})
		ws.Permits.RegisterActivity(acts.Remediation.RevokePermits)
	}
	return ws
}

// Start starts both workers.
func (w *Workers) Start() error {
	if err := w.Breaker.Start(); err != nil {
		return err
	}
	if w.Permits != nil {
		if err := w.Permits.Start(); err != nil {
			w.Breaker.Stop()
			return err
		}
	}
	if err := w.Devices.Start(); err != nil {
		w.Breaker.Stop()
		if w.Permits != nil {
			w.Permits.Stop()
		}
		return err
	}
	return nil
}

// Stop stops both workers.
func (w *Workers) Stop() {
	w.Devices.Stop()
	w.Breaker.Stop()
	if w.Permits != nil {
		w.Permits.Stop()
	}
}

// RegisterSearchAttributes adds DeviceWarden's search attributes to the namespace if missing.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	op := c.OperatorService()
	have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range api.SearchAttributeNames {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
		}
	}
	for _, name := range api.SearchAttributeLists {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST
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
