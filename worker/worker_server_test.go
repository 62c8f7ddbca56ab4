package worker

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/temporalserver/temporaltest"
	"github.com/devicewarden/devicewarden/worker/permits"
)

// everyDomain runs one activity of each domain by its type name, as a recorded history names it.
func everyDomain(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	calls := []struct {
		name string
		arg  any
	}{
		{"Alert", notify.AlertInput{Level: "info", Text: "registered"}},
		{"RecordMigration", map[string]any{}},
		{"RequestRolloutApproval", notify.RolloutApprovalRequest{Rollout: "r", Phase: "p"}},
		{"CheckCapacity", map[string]any{}},
	}
	for _, c := range calls {
		if err := workflow.ExecuteActivity(ctx, c.name, c.arg).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// The workers register every domain's activities under their method names, the search attributes
// once, and a worker that leases permits answers revocations on a queue of its own.
func TestWorkersRegisterEveryDomain(t *testing.T) {
	_, c := temporaltest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		if err := RegisterSearchAttributes(ctx, c, "default"); err != nil {
			t.Fatal(err)
		}
	}
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range api.SearchAttributeNames {
		if have.GetCustomAttributes()[name] != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
			t.Errorf("%s: %v", name, have.GetCustomAttributes()[name])
		}
	}
	for _, name := range api.SearchAttributeLists {
		if have.GetCustomAttributes()[name] != enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST {
			t.Errorf("%s: %v", name, have.GetCustomAttributes()[name])
		}
	}
	plain := New(c, NewActivities(Deps{}))
	if plain.Permits != nil {
		t.Error("a worker that asks for every permit got a revocation queue")
	}
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	plain.Stop()
	breaker := permits.New(c)
	queue := breaker.Queue
	ws := New(c, NewActivities(Deps{Kube: fake.NewClientset(), Metrics: metrics.New(), Breaker: breaker}))
	if ws.Permits == nil {
		t.Fatal("a worker that leases permits has no revocation queue")
	}
	ws.Devices.RegisterWorkflow(everyDomain)
	ws.Devices.RegisterWorkflow(revokeOn)
	if err := ws.Start(); err != nil {
		t.Fatal(err)
	}
	defer ws.Stop()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: api.TaskQueue}, everyDomain)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("an activity of some domain is not registered: %v", err)
	}
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: api.TaskQueue}, revokeOn, queue)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("the revocation queue is not served: %v", err)
	}
}

// revokeOn asks the worker whose revocation queue is queue to give back no lease.
func revokeOn(ctx workflow.Context, queue string) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: queue, ScheduleToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	return workflow.ExecuteActivity(ctx, "RevokePermits", map[string]any{"leases": []int64{}}).Get(ctx, nil)
}
