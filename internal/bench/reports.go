package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// ReportsOptions configures the report -> quarantine benchmark.
type ReportsOptions struct {
	Devices  int
	CacheDir string
	Out      io.Writer
	// Settle is the pause after each rule is seen before the next report (as in Quarantine).
	Settle time.Duration
	// Fleet, when set, is how many nodes of 8 GPUs, each GPU held by a Pod, the measured devices
	// are spread over (their own few nodes otherwise).
	Fleet int
	// ByName names each report's device by its DRA name (driver, pool, device) instead of its
	// UUID on its node.
	ByName bool
}

// Reports times a detector's DeviceHealthReport (a GPU's UUID on its node, as NVSentinel's template
// writes it) until its device's DeviceTaintRule is visible, one device at a time, beside the
// Pod-status path on the same stack: the devices alternate between the two.
func Reports(ctx context.Context, o ReportsOptions) error {
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{}, nil)
	if err != nil {
		return err
	}
	defer st.stop()
	targets, err := reportTargets(ctx, st.kube, o)
	if err != nil {
		return err
	}
	seen, stopWatch, err := watchRules(ctx, st.kube, watch.Added)
	if err != nil {
		return err
	}
	defer stopWatch()
	named := "its UUID on its node"
	if o.ByName {
		named = "its DRA name"
	}
	fmt.Fprintf(o.Out, "[bench] %d devices by Pod status and %d by a report naming %s, alternating, %s apart once each rule is seen\n", o.Devices, o.Devices, named, o.Settle)
	var byPod, byReport []time.Duration
	for i, tg := range targets {
		if i%2 == 0 {
			_, at, err := flip(ctx, st.kube, tg, []device.ID{tg.id}, seen)
			if err != nil {
				return err
			}
			byPod = append(byPod, at[0])
		} else {
			r := &unstructured.Unstructured{Object: map[string]any{"apiVersion": healthreport.Group + "/" + healthreport.Version,
				"kind": healthreport.Kind, "metadata": map[string]any{"name": fmt.Sprintf("bench-%d", i)},
				"spec": reportSpec(tg.id, o.ByName)}}
			start := time.Now()
			if _, err := st.reports.Create(ctx, r, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create report: %w", err)
			}
			select {
			case at := <-seen(tg.id.TaintRuleName()):
				byReport = append(byReport, at.Sub(start))
			case <-time.After(30 * time.Second):
				return fmt.Errorf("no DeviceTaintRule for %s after 30s (reported by %s)", tg.id, r.GetName())
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-time.After(o.Settle):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	printLatency(o.Out, "Pod status write -> DeviceTaintRule visible", byPod)
	printLatency(o.Out, "report created -> DeviceTaintRule visible", byReport)
	ratio := func(p float64) float64 { return float64(percentile(byReport, p)) / float64(percentile(byPod, p)) }
	fmt.Fprintf(o.Out, "report / Pod status: p50 %.2fx, p99 %.2fx\n", ratio(0.50), ratio(0.99))
	return nil
}

// reportSpec is a detector's report of XID 79 on the device: by its DRA name, or by its UUID on
// its node (as NVSentinel's template writes it).
func reportSpec(id device.ID, byName bool) map[string]any {
	spec := map[string]any{"health": "Unhealthy", "cause": map[string]any{"code": "79"}, "source": "bench"}
	if byName {
		spec["device"] = map[string]any{"driver": id.Driver, "pool": id.Pool, "name": id.Device}
	} else {
		spec["node"], spec["attribute"] = id.Pool, map[string]any{"name": sim.AttrUUID, "value": sim.UUID(id)}
	}
	return spec
}

// reportTargets are the devices a report or a Pod status names: on nodes of their own, or spread
// evenly over a fleet of o.Fleet nodes.
func reportTargets(ctx context.Context, kube kubernetes.Interface, o ReportsOptions) ([]benchTarget, error) {
	n := 2 * o.Devices
	if o.Fleet == 0 {
		return setupPods(ctx, kube, n, o.Out)
	}
	// The command refuses a fleet with fewer GPUs than n.
	all, err := placeFleet(ctx, kube, o.Fleet*fleetGPUsPerNode, o.Out)
	if err != nil {
		return nil, err
	}
	return spread(all, n), nil
}

// spread picks n of all, evenly apart.
func spread[T any](all []T, n int) []T {
	out := make([]T, 0, n)
	for i := range n {
		out = append(out, all[i*len(all)/n])
	}
	return out
}
