package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// Capacity loads the rollout benchmark's fleet (nodes x shared GPUs, allocated claims) into a
// fresh apiserver and times the capacity check (list + check) and one what-if over every node
// (list + the scheduler's allocator per node).
func Capacity(ctx context.Context, o RolloutOptions) error {
	dir, err := os.MkdirTemp("", "devicewarden-bench-capacity-")
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
	if err := sim.EnsureDeviceClass(ctx, kube); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "loaded %d nodes x %d devices and %d allocated claims in %s\n", o.Nodes, o.Devices, o.Claims, time.Since(start).Round(time.Millisecond))
	acts := &activities.Activities{Kube: kube}
	probe := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "what-if", Namespace: "tenant-0", UID: "what-if"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.Driver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("8Gi")}}}}}}}}
	measure := func(name string, fn func() (string, error)) error {
		var times []time.Duration
		var allocs []uint64
		var what string
		for i := 0; i < max(1, o.Runs); i++ {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			t0 := time.Now()
			w, err := fn()
			if err != nil {
				return err
			}
			times = append(times, time.Since(t0))
			runtime.ReadMemStats(&after)
			allocs = append(allocs, after.TotalAlloc-before.TotalAlloc)
			what = w
		}
		slices.Sort(times)
		slices.Sort(allocs)
		fmt.Fprintf(o.Out, "%s (%d runs): p50 %s, max %s; allocated per run p50 %.1f MiB; %s\n", name, len(times),
			times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), float64(allocs[len(allocs)/2])/(1<<20), what)
		return nil
	}
	if err := measure("capacity check (list + check)", func() (string, error) {
		rep, err := acts.CheckCapacity(ctx, activities.CapacityInput{})
		return fmt.Sprintf("%d violations over %d claims and %d devices", len(rep.Violations), rep.Claims, rep.Devices), err
	}); err != nil {
		return err
	}
	return measure("what-if on every node (list + allocator)", func() (string, error) {
		c, err := capacity.ReadCluster(ctx, kube)
		if err != nil {
			return "", err
		}
		fits, err := capacity.Fit(ctx, c, []*resourcev1.ResourceClaim{probe}, "", false)
		n := 0
		for _, f := range fits {
			if f.Fits {
				n++
			}
		}
		return fmt.Sprintf("fits on %d of %d nodes", n, len(fits)), err
	})
}
