package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"
)

// stormSize is how many of the fleet's devices the storm turns: its share, at least one.
func stormSize(o StormOptions) int {
	if o.Share <= 0 || o.Share >= 1 {
		return o.Devices
	}
	return max(1, int(math.Round(float64(o.Devices)*o.Share)))
}

// restSettle is how long the placed fleet is left before it is measured at rest: the watcher
// takes in every Pod, slice and Lease it lists.
const restSettle = 15 * time.Second

// atRest measures the placed, healthy fleet for d: the CPU of the bench process (worker and
// watcher, and the embedded Temporal server when it runs there) and of the control plane, the
// bench process's heap, and the Temporal actions spent; it fails when the healthy fleet has a
// device workflow.
func atRest(ctx context.Context, st *stack, pids map[string]int, d time.Duration, devices int, out io.Writer) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(restSettle):
	}
	actions0, err := readActions(ctx, st)
	if err != nil {
		return err
	}
	events0 := watchEvents(st.metrics)
	cpu := startCPU(pids)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	spent := cpu.stop()
	events := eventRates(events0, watchEvents(st.metrics), d)
	actions1, err := readActions(ctx, st)
	if err != nil {
		return err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cp := spent.procs["kube-apiserver"] + spent.procs["etcd"]
	fmt.Fprintf(out, "at rest, %d healthy devices on %d nodes, over %s: devicewarden process (%s) %.2f CPU-s (%.2f%% of a core), heap in use %.1f MiB; apiserver+etcd %.2f CPU-s: devicewarden %.1f%% of theirs",
		devices, devices/8, d, st.holds(), spent.self.Seconds(), 100*spent.self.Seconds()/d.Seconds(), float64(ms.HeapInuse)/(1<<20), cp.Seconds(), 100*spent.self.Seconds()/max(cp.Seconds(), 0.01))
	if actions1 != nil {
		total := 0.0
		for _, n := range billed(actions0, actions1) {
			total += n
		}
		fmt.Fprintf(out, "; Temporal actions %.0f", total)
	}
	fmt.Fprintln(out)
	if events == "" {
		events = "none"
	}
	fmt.Fprintf(out, "at rest: the watcher's watch events per second by kind: %s\n", events)
	if by := spent.byOwner(); by != "" {
		fmt.Fprintf(out, "at rest: devicewarden process CPU profile by owner, CPU-s: %s\n", by)
	}
	// A healthy fleet costs Temporal nothing: not one device workflow.
	if n, err := deviceWorkflows(ctx, st.tc, ""); err != nil || n > 0 {
		return fmt.Errorf("at rest, %d device workflows for a healthy fleet (%v)", n, err)
	}
	return nil
}
