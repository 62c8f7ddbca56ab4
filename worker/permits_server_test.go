package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/temporalserver/temporaltest"
	"github.com/devicewarden/devicewarden/worker/permits"
)

// permitProcess is one worker process as far as permits go: its own client, its breaker client
// and its workers as the binary builds them (devices, breaker, and the queue that answers the
// breaker's revocations).
type permitProcess struct {
	client  client.Client
	breaker *permits.Client
	workers *Workers
}

func startPermitProcess(t *testing.T, addr string) *permitProcess {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: addr, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	bc := permits.New(c)
	ws := New(c, NewActivities(Deps{Kube: fake.NewClientset(), Breaker: bc}))
	if err := ws.Start(); err != nil {
		t.Fatal(err)
	}
	return &permitProcess{client: c, breaker: bc, workers: ws}
}

// kill stops the process without giving anything back, as a crash would.
func (p *permitProcess) kill() {
	p.workers.Stop()
	p.client.Close()
}

// Three worker processes lease permits from one breaker on a real Temporal server while 500
// devices ask at once, and one of them is killed holding a batch: the permits granted never
// exceed the cap, the dead worker's batch still counts as used, and a pause answers only once
// no worker can spend a leased permit, with every granted permit accounted for.
func TestManyWorkersNeverPassTheCap(t *testing.T) {
	srv, c := temporaltest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	procs := []*permitProcess{startPermitProcess(t, srv.FrontendAddress()), startPermitProcess(t, srv.FrontendAddress()), startPermitProcess(t, srv.FrontendAddress())}
	defer func() {
		for _, p := range procs[:2] {
			p.kill()
		}
	}()
	// Every process also runs a breaker worker: the breaker's own workflow may be on the one killed.
	cfg := breaker.Config{Window: 10 * time.Minute, MaxCount: 50}
	if err := (&api.BreakerClient{Client: c}).Configure(ctx, cfg, "test"); err != nil {
		t.Fatal(err)
	}

	var granted atomic.Int64
	ask := func(from, to int, workers []*permitProcess) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Go(func() {
				req := breaker.PermitRequest{Device: device.ID{Driver: "gpu.test", Pool: "node", Device: fmt.Sprint("gpu-", i)}, Action: decide.Quarantined, Config: cfg}
				res, err := workers[i%len(workers)].breaker.Acquire(ctx, req)
				if err != nil {
					t.Errorf("gpu-%d: %v", i, err)
					return
				}
				if res.Granted {
					granted.Add(1)
				}
			})
		}
		wg.Wait()
	}
	// A first wave leaves each worker holding a batch.
	ask(0, 30, procs)
	dead := procs[2].breaker
	held := dead.Unspent(breaker.BudgetOf(decide.Quarantined))
	if held == 0 {
		t.Fatalf("the worker to be killed holds no permits (granted so far %d)", granted.Load())
	}
	procs[2].kill()
	// The rest ask at once through the two left.
	ask(30, 500, procs[:2])
	if n := granted.Load(); n > int64(cfg.MaxCount) {
		t.Fatalf("%d permits granted, over the cap of %d", n, cfg.MaxCount)
	}
	if n := granted.Load(); n+int64(held) > int64(cfg.MaxCount) {
		t.Fatalf("%d granted and %d held by the dead worker: over the cap of %d", n, held, cfg.MaxCount)
	}

	time.Sleep(1500 * time.Millisecond) // the live workers report what they spent
	start := time.Now()
	st, err := (&api.BreakerClient{Client: c}).Pause(ctx, api.BreakerSignal{Actor: "sre", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("granted %d of %d; the dead worker held %d; pause answered in %s; breaker: %d grants, leases %+v",
		granted.Load(), cfg.MaxCount, held, time.Since(start).Round(time.Millisecond), len(st.Grants), st.Leases)
	leased, deadLeased := 0, 0
	for _, l := range st.Leases {
		leased += l.Count
		if l.Worker == dead.Worker {
			deadLeased += l.Count
		}
	}
	// The dead worker's batch counts, and so do the permits it spent without reporting them.
	if deadLeased < held {
		t.Fatalf("the dead worker's %d permits count as %d", held, deadLeased)
	}
	if len(st.Grants)+leased > cfg.MaxCount {
		t.Fatalf("the breaker counts %d grants and %d leased: over the cap of %d", len(st.Grants), leased, cfg.MaxCount)
	}
	if int64(len(st.Grants)+deadLeased-held) < granted.Load() {
		t.Fatalf("%d permits granted; the breaker names %d and holds %d the dead worker may have spent", granted.Load(), len(st.Grants), deadLeased-held)
	}
	if !st.Open {
		t.Fatal("the pause left the breaker closed")
	}
	temporaltest.Record(t, ctx, c, api.BreakerWorkflowID, "", "breaker_leases.json")
	for _, p := range procs[:2] {
		if res, err := p.breaker.Acquire(ctx, breaker.PermitRequest{Device: device.ID{Driver: "gpu.test", Pool: "node", Device: "late"}, Action: decide.Quarantined, Config: cfg}); err != nil || res.Granted {
			t.Fatalf("after the pause a worker granted %+v (%v)", res, err)
		}
	}
}
