// Package bench measures DeviceWarden end to end on the real local stack and prints figures.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// QuarantineOptions configures the detect -> quarantine benchmark.
type QuarantineOptions struct {
	Devices  int
	CacheDir string
	Out      io.Writer
	// Settle is the pause after each rule is seen before the next status write: the floor's parts
	// are each measured on a quiet stack, and without it each sample shares the 2 cores with the
	// previous device's follow-up (its critical alert, its node report, the node's workflow).
	Settle time.Duration
}

// Quarantine starts a fresh cluster, embedded Temporal, worker and watcher; runs one pod per device;
// then, one device at a time, writes Unhealthy into the pod's status and times how long until the
// device's DeviceTaintRule is visible through a watch.
func Quarantine(ctx context.Context, o QuarantineOptions) error {
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{}, nil)
	if err != nil {
		return err
	}
	defer st.stop()
	kube, tc := st.kube, st.tc
	targets, err := setupPods(ctx, kube, o.Devices, o.Out)
	if err != nil {
		return err
	}
	seen, stopWatch, err := watchRules(ctx, kube, watch.Added)
	if err != nil {
		return err
	}
	defer stopWatch()
	fmt.Fprintf(o.Out, "[bench] flipping %d devices Unhealthy, one at a time, %s apart once each rule is seen\n", len(targets), o.Settle)
	var lat []time.Duration
	starts := make([]time.Time, 0, len(targets))
	for _, tg := range targets {
		start, at, err := flip(ctx, kube, tg, []device.ID{tg.id}, seen)
		if err != nil {
			return err
		}
		starts, lat = append(starts, start), append(lat, at[0])
		select {
		case <-time.After(o.Settle):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	printLatency(o.Out, "status write -> DeviceTaintRule visible", lat)
	if err := breakdown(ctx, o.Out, tc, targets, starts, lat); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "[bench] measuring the floor on the same stack, %d samples of each part\n", len(targets))
	f, err := measureFloor(ctx, kube, tc, len(targets))
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	printFloor(o.Out, f, lat)
	return nil
}

// breakdown splits each device's latency at the workflow's own start event: before it, the
// watch, the watcher and signal-with-start; after it, the workflow deciding, the breaker permit
// (an update on the breaker workflow), the quarantine (local activities) and the rule's watch event.
func breakdown(ctx context.Context, out io.Writer, tc client.Client, targets []benchTarget, starts []time.Time, lat []time.Duration) error {
	var toStart, rest []time.Duration
	for i, tg := range targets {
		it := tc.GetWorkflowHistory(ctx, tg.id.WorkflowID(), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		if !it.HasNext() {
			continue
		}
		ev, err := it.Next()
		if err != nil {
			return fmt.Errorf("read history of %s: %w", tg.id, err)
		}
		if ev.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED {
			continue
		}
		started := ev.GetEventTime().AsTime()
		toStart = append(toStart, started.Sub(starts[i]))
		rest = append(rest, starts[i].Add(lat[i]).Sub(started))
	}
	printLatency(out, "  status write -> workflow started (watch, watcher, update-with-start)", toStart)
	printLatency(out, "  workflow started -> rule seen (decision, breaker permit, quarantine, watch)", rest)
	return nil
}

type benchTarget struct {
	id device.ID
	t  sim.Target
}

func setupPods(ctx context.Context, kube kubernetes.Interface, devices int, out io.Writer) ([]benchTarget, error) {
	const perNode = 8
	nodes, err := sim.CreateNodes(ctx, kube, "bench", (devices+perNode-1)/perNode, perNode)
	if err != nil {
		return nil, err
	}
	const ns = "bench"
	if err := sim.EnsureNamespace(ctx, kube, ns); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "[bench] starting %d pods, one per device, on %d nodes\n", devices, len(nodes))
	var targets []benchTarget
	for i := 0; i < devices; i++ {
		node, idx := nodes[i/perNode], i%perNode
		name := fmt.Sprintf("job-%d", i)
		if _, err := (sim.Workload{Namespace: ns, Name: name, Node: node, Index: ptr.To(idx)}).Create(ctx, kube); err != nil {
			return nil, err
		}
		targets = append(targets, benchTarget{
			id: device.ID{Driver: sim.Driver, Pool: node, Device: fmt.Sprintf("gpu-%d", idx)},
			t:  sim.Target{Namespace: ns, Pod: name, Container: "main", EntryName: "claim:" + sim.PodClaimName},
		})
	}
	if err := waitRunning(ctx, kube, ns, devices, 3*time.Minute+time.Duration(devices)*60*time.Millisecond); err != nil {
		return nil, err
	}
	return targets, nil
}

// watchRules records when each DeviceTaintRule first has an event of the given type (Added: it
// appears; Deleted: it is gone); seen(name) yields that time.
func watchRules(ctx context.Context, kube kubernetes.Interface, evType watch.EventType) (func(string) <-chan time.Time, func(), error) {
	w, err := kube.ResourceV1().DeviceTaintRules().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("watch device taint rules: %w", err)
	}
	var mu sync.Mutex
	chans := map[string]chan time.Time{}
	get := func(name string) chan time.Time {
		mu.Lock()
		defer mu.Unlock()
		if chans[name] == nil {
			chans[name] = make(chan time.Time, 1)
		}
		return chans[name]
	}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != evType {
				continue
			}
			if r, ok := ev.Object.(*resourcev1.DeviceTaintRule); ok {
				select {
				case get(r.Name) <- time.Now():
				default:
				}
			}
		}
	}()
	return func(name string) <-chan time.Time { return get(name) }, w.Stop, nil
}

func printLatency(out io.Writer, what string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	f := func(d time.Duration) string { return fmt.Sprintf("%.1fms", ms(d)) }
	fmt.Fprintf(out, "%s over %d samples: p50 %s  p90 %s  p99 %s  max %s  mean %s\n",
		what, len(lat), f(percentile(lat, 0.50)), f(percentile(lat, 0.90)), f(percentile(lat, 0.99)), f(slices.Max(lat)), f(sum/time.Duration(len(lat))))
}

// percentile is the p-th (0 to 1) of samples that are not empty, as printLatency reports it.
func percentile(lat []time.Duration, p float64) time.Duration {
	s := slices.Sorted(slices.Values(lat))
	return s[min(len(s)-1, int(p*float64(len(s))))]
}
