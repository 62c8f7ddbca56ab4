package worker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/temporalserver/temporaltest"
	"github.com/devicewarden/devicewarden/worker/permits"
	"github.com/devicewarden/devicewarden/workflows"
)

// revokeInput is the breaker's revocation as it travels (the remediation activity's input; the
// worker package's test runs that activity itself).
type revokeInput struct {
	Leases []int64 `json:"leases"`
}

// One worker's breaker client against the real breaker workflow: it leases a batch with its first
// permit and spends the rest in process; a refusal is answered here and its devices reach the
// breaker's wait list; a client that does not lease asks for each permit; a pause takes back the
// unspent batch before it answers.
func TestBreakerClientOnTheBreakerWorkflow(t *testing.T) {
	_, c := temporaltest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bc := permits.New(c)
	bw := sdkworker.New(c, api.BreakerTaskQueue, sdkworker.Options{})
	bw.RegisterWorkflow(workflows.BreakerWorkflow)
	bw.RegisterActivityWithOptions(func(context.Context, any) error { return nil }, activity.RegisterOptions{Name: "Alert"})
	pw := sdkworker.New(c, bc.Queue, sdkworker.Options{})
	pw.RegisterActivityWithOptions(func(_ context.Context, in revokeInput) ([]breaker.LeaseReport, error) {
		return bc.Revoke(in.Leases), nil
	}, activity.RegisterOptions{Name: "RevokePermits"})
	for _, w := range []sdkworker.Worker{bw, pw} {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
	}
	cfg := breaker.Config{Window: 10 * time.Minute, MaxCount: 10}
	if err := bc.Configure(ctx, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	req := func(i int) breaker.PermitRequest {
		return breaker.PermitRequest{Device: device.ID{Driver: "gpu.test", Pool: "node", Device: fmt.Sprint("gpu-", i)}, Action: decide.Quarantined, Config: cfg}
	}
	budget := breaker.BudgetOf(decide.Quarantined)

	// The first permit leases a batch (at most half of what is left free); the next come out of it.
	var first int
	for i := range 3 {
		res, err := bc.Acquire(ctx, req(i))
		if err != nil || !res.Granted {
			t.Fatalf("gpu-%d: %+v %v", i, res, err)
		}
		if i == 0 {
			first = bc.Unspent(budget)
		}
	}
	if first < 2 || first > (cfg.MaxCount-1)/2 || bc.Unspent(budget) != first-2 {
		t.Fatalf("batch leased with the first permit: %d; after two more: %d", first, bc.Unspent(budget))
	}
	// Asked again within the window, a device granted here is granted at no cost.
	if res, err := bc.Acquire(ctx, req(0)); err != nil || !res.Granted || bc.Unspent(budget) != first-2 {
		t.Fatalf("a repeat: %+v %v, unspent %d", res, err, bc.Unspent(budget))
	}

	// The permits spent here are reported: the breaker names each granted device.
	deadline := time.Now().Add(10 * time.Second)
	for named := 0; named < 3; {
		named = 0
		for _, g := range breakerState(t, ctx, c).Grants {
			if g.Device == req(0).Key() || g.Device == req(1).Key() || g.Device == req(2).Key() {
				named++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the breaker names %d of the 3 devices granted here", named)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A pause takes back what the worker has not spent before it answers.
	st, err := bc.Pause(ctx, api.BreakerSignal{Actor: "sre", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Open || bc.Unspent(budget) != 0 {
		t.Fatalf("after the pause: open %v, unspent %d", st.Open, bc.Unspent(budget))
	}
	if len(st.Grants) > 3 {
		t.Fatalf("the breaker counts %d grants for 3 permits spent", len(st.Grants))
	}
	res, err := bc.Acquire(ctx, req(10))
	if err != nil || res.Granted || res.Reason == "" {
		t.Fatalf("while paused: %+v %v", res, err)
	}
	// The refusal is answered here now, and the device reaches the breaker's wait list.
	res, err = bc.Acquire(ctx, req(11))
	if err != nil || res.Granted || res.Reason == "" {
		t.Fatalf("refused here: %+v %v", res, err)
	}
	waiting := func() []string { return breakerState(t, ctx, c).Waiting }
	deadline = time.Now().Add(10 * time.Second)
	for !slices.Contains(waiting(), req(11).Device.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("gpu-11 refused here never reached the wait list: %v", waiting())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Resumed, a client that leases nothing asks the breaker for each permit.
	if err := c.SignalWorkflow(ctx, api.BreakerWorkflowID, "", api.SignalBreakerResume, api.BreakerSignal{Actor: "sre", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for breakerState(t, ctx, c).Open {
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not resume")
		}
		time.Sleep(100 * time.Millisecond)
	}
	plain := &api.BreakerClient{Client: c}
	granted := 0
	for i := 20; i < 40; i++ {
		res, err := plain.Acquire(ctx, req(i))
		if err != nil {
			t.Fatal(err)
		}
		if res.Granted {
			granted++
		}
	}
	if granted == 0 || granted > cfg.MaxCount {
		t.Fatalf("%d of 20 granted one by one under a cap of %d", granted, cfg.MaxCount)
	}
}

func breakerState(t *testing.T, ctx context.Context, c client.Client) breaker.State {
	t.Helper()
	var s breaker.State
	v, err := c.QueryWorkflow(ctx, api.BreakerWorkflowID, "", api.QueryState)
	if err == nil {
		err = v.Get(&s)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}
