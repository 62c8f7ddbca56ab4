package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/watcher"
)

// FloodOptions configures the report flood benchmark.
type FloodOptions struct {
	Reports, Devices int
	Over             time.Duration
	CacheDir         string
	Out              io.Writer
}

// Flood creates Reports DeviceHealthReports over Over, spread over Devices idle GPUs (a detector
// that reports each GPU many times), under the default circuit breaker, and says what DeviceWarden
// made of them: signals sent (deduplicated), rules written (the breaker's cap), and the status
// writes it made to the apiserver.
func Flood(ctx context.Context, o FloodOptions) error {
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{Breaker: breaker.DefaultConfig()}, nil)
	if err != nil {
		return err
	}
	defer st.stop()
	const perNode = 8
	nodes, err := sim.CreateNodes(ctx, st.kube, "flood", (o.Devices+perNode-1)/perNode, perNode)
	if err != nil {
		return err
	}
	ids := make([]device.ID, o.Devices)
	for i := range ids {
		ids[i] = device.ID{Driver: sim.Driver, Pool: nodes[i/perNode], Device: "gpu-" + strconv.Itoa(i%perNode)}
	}
	fmt.Fprintf(o.Out, "[bench] %d reports over %s about %d GPUs, default breaker (%d per %s, %.0f%%)\n",
		o.Reports, o.Over, o.Devices, breaker.DefaultConfig().MaxCount, breaker.DefaultConfig().Window, breaker.DefaultConfig().MaxPercent)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id := ids[i%len(ids)]
				r := &unstructured.Unstructured{Object: map[string]any{"apiVersion": healthreport.Group + "/" + healthreport.Version,
					"kind": healthreport.Kind, "metadata": map[string]any{"name": "flood-" + strconv.Itoa(i)},
					"spec": map[string]any{"node": id.Pool, "attribute": map[string]any{"name": sim.AttrUUID, "value": sim.UUID(id)},
						"health": "Unhealthy", "cause": map[string]any{"code": "79"}, "source": "flood"}}}
				if _, err := st.reports.Create(ctx, r, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	every := o.Over / time.Duration(o.Reports)
	for i := range o.Reports {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		next <- i
	}
	close(next)
	wg.Wait()
	created := time.Since(start)
	select {
	case err := <-errs:
		return fmt.Errorf("create a report: %w", err)
	default:
	}
	m := st.metrics
	writes := func() float64 { return testutil.ToFloat64(m.WatcherEvents.WithLabelValues("report", "status-write")) }
	// Done when every report's status is written.
	for deadline := time.Now().Add(10 * time.Minute); writes() < float64(o.Reports); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %.0f of %d report statuses written after 10 minutes", writes(), o.Reports)
		}
	}
	settled := time.Since(start)
	rules, err := st.kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.LabelManagedBy + "=" + kubeobj.ManagedBy})
	if err != nil {
		return err
	}
	list, err := st.reports.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	outcomes := map[string]int{}
	for _, u := range list.Items {
		r, _ := healthreport.FromObject(u.Object)
		outcomes[r.Status.Outcome]++
	}
	fmt.Fprintf(o.Out, "reports created: %d in %s (%.0f/s)\n", o.Reports, created.Round(time.Millisecond), float64(o.Reports)/created.Seconds())
	signals := testutil.ToFloat64(m.Signals.WithLabelValues("ok"))
	fmt.Fprintf(o.Out, "signals sent to device workflows: %.0f (%.2f per report), for %d devices\n", signals, signals/float64(o.Reports), o.Devices)
	fmt.Fprintf(o.Out, "rules written: %d (breaker: %.0f granted, %.0f denied)\n", len(rules.Items),
		testutil.ToFloat64(m.Permits.WithLabelValues("granted")), testutil.ToFloat64(m.Permits.WithLabelValues("denied")))
	fmt.Fprintf(o.Out, "report status writes: %.0f (%.2f per report), all written %s after the first report (at most %d/s by design)\n",
		writes(), writes()/float64(o.Reports), settled.Round(time.Millisecond), watcher.ReportStatusQPS)
	fmt.Fprintf(o.Out, "report outcomes: %v\n", outcomes)
	return nil
}
