package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/rolloutplan"
	"github.com/devicewarden/devicewarden/internal/rolloutread"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// RolloutOptions size the rollout gate benchmark.
type RolloutOptions struct {
	Nodes, Devices, Claims int
	Runs                   int
	CacheDir               string
	Out                    io.Writer
}

// rolloutTenants is how many namespaces the benchmark's claims are spread over.
const rolloutTenants = 20

// Rollout loads nodes x devices shared GPUs (one ResourceSlice per node) and claims allocated on
// them (status written as the scheduler writes it) into a fresh apiserver, then times the gate
// activity end to end: list nodes, slices, claims and the tenants' Pods, reduce, evaluate every gate.
func Rollout(ctx context.Context, o RolloutOptions) error {
	return withFleet(ctx, o, func(kube kubernetes.Interface, loaded time.Time) error {
		plan, since := rolloutBenchPlan(), loaded.Add(-time.Hour).Truncate(time.Second)
		var r rolloutplan.Report
		st, err := timeRuns(o.Runs, func() error {
			// What the gate activity does before it saves the report: the same library, the same rules.
			snap, err := rolloutread.Snapshot(ctx, kube, "default", plan, 0, nil, true)
			if err == nil {
				r = rolloutplan.Evaluate(plan, 0, since, snap, nil)
			}
			return err
		})
		if err != nil {
			return err
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(o.Out, "gate evaluation (list + reduce + evaluate, %s; heap in use after %.1f MiB\n", st, float64(ms.HeapInuse)/(1<<20))
		fmt.Fprintf(o.Out, "report: %d claims in the phase, claim->allocated p99 %s, %d drift, fragmentation %+v, passed %t\n",
			r.Claims, r.ClaimToAllocated.P99, len(r.Drift), r.Fragmentation, r.Passed())
		return nil
	})
}

// withFleet starts a fresh apiserver, loads the benchmark fleet into it (nodes x shared GPUs and
// the allocated claims), says how long that took, and runs fn; loaded is when the load began.
func withFleet(ctx context.Context, o RolloutOptions, fn func(kube kubernetes.Interface, loaded time.Time) error) error {
	dir, err := os.MkdirTemp("", "devicewarden-bench-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cl, kube, err := startCluster(ctx, dir, o.CacheDir, o.Out, true, 5000, 10000)
	if err != nil {
		return err
	}
	defer func() { _ = cl.Stop() }()
	start := time.Now()
	if err := loadRolloutFleet(ctx, kube, o); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "loaded %d nodes x %d devices and %d allocated claims in %s\n", o.Nodes, o.Devices, o.Claims, time.Since(start).Round(time.Millisecond))
	return fn(kube, start)
}

// runStats are the timings and allocations of repeated runs.
type runStats struct {
	runs            int
	p50, max        time.Duration
	allocatedP50MiB float64
}

func (s runStats) String() string {
	return fmt.Sprintf("%d runs): p50 %s, max %s; allocated per run p50 %.1f MiB", s.runs,
		s.p50.Round(time.Millisecond), s.max.Round(time.Millisecond), s.allocatedP50MiB)
}

// timeRuns runs fn runs times (at least once), each after a GC, and measures its time and the
// bytes it allocated.
func timeRuns(runs int, fn func() error) (runStats, error) {
	var times []time.Duration
	var allocs []uint64
	for i := 0; i < max(1, runs); i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		t0 := time.Now()
		if err := fn(); err != nil {
			return runStats{}, err
		}
		times = append(times, time.Since(t0))
		runtime.ReadMemStats(&after)
		allocs = append(allocs, after.TotalAlloc-before.TotalAlloc)
	}
	slices.Sort(times)
	slices.Sort(allocs)
	return runStats{runs: len(times), p50: times[len(times)/2], max: times[len(times)-1],
		allocatedP50MiB: float64(allocs[len(allocs)/2]) / (1 << 20)}, nil
}

func rolloutBenchPlan() rolloutplan.Plan {
	var ns []string
	for i := 0; i < rolloutTenants; i++ {
		ns = append(ns, fmt.Sprintf("tenant-%d", i))
	}
	drift, frag := 0, 0.5
	return rolloutplan.Plan{Name: "bench", OwnerLabel: sim.LabelOwner, Plugin: sim.OwnerPlugin, DRA: sim.OwnerDRA, PluginResource: sim.GPUPluginResource,
		Phases: []rolloutplan.Phase{{Name: "fleet", Nodes: sim.LabelPool + "=bench", Classes: []rolloutplan.Class{{Name: sim.Driver, Driver: sim.Driver}},
			Namespaces: ns, Gates: rolloutplan.Gates{MaxDrift: &drift, MaxFragmentation: &frag}}}}
}

// loadRolloutFleet creates the nodes, slices, namespaces and allocated claims with 32 writers.
func loadRolloutFleet(ctx context.Context, kube kubernetes.Interface, o RolloutOptions) error {
	for i := 0; i < rolloutTenants; i++ {
		if err := sim.EnsureNamespace(ctx, kube, fmt.Sprintf("tenant-%d", i)); err != nil {
			return err
		}
	}
	if err := parallel(ctx, 32, o.Nodes, func(i int) error {
		name := fmt.Sprintf("bench-%d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{sim.LabelPool: "bench", sim.LabelOwner: sim.OwnerDRA}}}
		if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := kube.ResourceV1().ResourceSlices().Create(ctx, sim.NodeSlice(name, o.Devices, true), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("load nodes: %w", err)
	}
	return parallel(ctx, 32, o.Claims, func(i int) error {
		ns := fmt.Sprintf("tenant-%d", i%rolloutTenants)
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i), Namespace: ns},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.Driver}}}}}}
		c, err := kube.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		node := fmt.Sprintf("bench-%d", i%o.Nodes)
		c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: sim.Driver, Pool: node, Device: fmt.Sprintf("gpu-%d", (i/o.Nodes)%o.Devices),
			ShareID:          ptr.To(types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))),
			ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse(fmt.Sprintf("%dGi", 4+4*(i%3)))},
		}}}}
		_, err = kube.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: "bench-scheduler"})
		return err
	})
}
