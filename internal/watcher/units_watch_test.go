package watcher

import (
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// gpuForm draws n of its GPU's 7 compute slices.
func gpuForm(name, set string, n int64) resourcev1.Device {
	return resourcev1.Device{Name: name, ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set,
		Counters: map[string]resourcev1.Counter{"slices": {Value: *resource.NewQuantity(n, resource.DecimalSI)}}}}}
}

// partitionedPool is node-1's pool: a counters slice and a devices slice, two GPUs of 7 slices,
// each published whole and as partitions (plus whatever extra devices the slice adds).
func partitionedPool(extra ...resourcev1.Device) (counters, devs *resourcev1.ResourceSlice) {
	pool := resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 2}
	counters = &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-counters"},
		Spec: resourcev1.ResourceSliceSpec{Driver: drv, Pool: pool, NodeName: ptr.To("node-1")}}
	for i := range 2 {
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourcev1.CounterSet{Name: "gpu-" + strconv.Itoa(i) + "-counters",
			Counters: map[string]resourcev1.Counter{"slices": {Value: *resource.NewQuantity(7, resource.DecimalSI)}}})
	}
	devs = &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-devices"},
		Spec: resourcev1.ResourceSliceSpec{Driver: drv, Pool: pool, NodeName: ptr.To("node-1"), Devices: append([]resourcev1.Device{
			gpuForm("gpu-0", "gpu-0-counters", 7), gpuForm("gpu-0-mig-a", "gpu-0-counters", 1), gpuForm("gpu-0-mig-b", "gpu-0-counters", 3),
			gpuForm("gpu-1", "gpu-1-counters", 7), gpuForm("gpu-1-mig-a", "gpu-1-counters", 1)}, extra...)}}
	return counters, devs
}

// holder is a Pod whose one claim holds dev and reports it with health.
func holder(name, dev, health string) (*corev1.Pod, *resourcev1.ResourceClaim) {
	p := podWith(healthEntry("claim:gpu", "cdi-"+name, health, nil))
	p.Name = name
	p.Status.ResourceClaimStatuses[0].ResourceClaimName = ptr.To(name + "-gpu")
	c := claimWith(name+"-gpu", result("gpus", dev))
	c.Status.ReservedFor[0].Name = name
	return p, c
}

// A report from one partition of gpu-0 goes to one workflow, keyed by gpu-0's counter set, with
// every form of gpu-0 in the observation; the Pod on its sibling partition, which reports
// nothing, is adopted as a holder; gpu-1's Pod is not. A partition published later makes the
// unit's workflow hear of it.
func TestPartitionReportsGoToTheirPhysicalUnit(t *testing.T) {
	counters, devs := partitionedPool()
	// h is listed before r, so when h is first seen nothing follows gpu-0 yet; and h reports
	// nothing at all, yet holds a form of gpu-0.
	a, ca := holder("r", "gpu-0-mig-a", "Unhealthy")
	b, cb := holder("h", "gpu-0-mig-b", "Healthy")
	b.Status.ContainerStatuses[0].AllocatedResourcesStatus = nil
	c, cc := holder("c", "gpu-1-mig-a", "Healthy")
	kube := fake.NewSimpleClientset(counters, devs, a, ca, b, cb, c, cc)
	rec := &recorder{}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
	ctx := start(t, w)

	unit := device.ID{Driver: drv, Pool: "node-1", Device: "counters=gpu-0-counters"}
	last := func() api.Observation {
		got := rec.signals()
		if len(got) == 0 {
			return api.Observation{}
		}
		return got[len(got)-1]
	}
	pods := func(o api.Observation) []string {
		var out []string
		for _, r := range o.Reporters {
			out = append(out, r.Pod+"@"+r.Device)
		}
		return out
	}
	waitUntil(t, "both holders of gpu-0 in one observation", func() bool {
		return slices.Equal(pods(last()), []string{"h@gpu-0-mig-b", "r@gpu-0-mig-a"})
	})
	for _, o := range rec.signals() {
		if o.Device != unit {
			t.Fatalf("signalled %s, want only the unit %s", o.Device, unit)
		}
	}
	o := last()
	if o.Health != device.Unhealthy || o.Unit == nil || o.Unit.Whole != "gpu-0" ||
		!slices.Equal(o.Unit.Devices, []string{"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b"}) {
		t.Fatalf("observation %+v unit %+v", o, o.Unit)
	}

	// A reconfiguration publishes a new partition of gpu-0: the unit's workflow hears of it.
	_, grown := partitionedPool(gpuForm("gpu-0-mig-c", "gpu-0-counters", 1))
	grown.ResourceVersion = "2"
	if _, err := kube.ResourceV1().ResourceSlices().Update(ctx, grown, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the grown unit signalled", func() bool {
		u := last().Unit
		return u != nil && slices.Contains(u.Devices, "gpu-0-mig-c")
	})
	if o := last(); o.Device != unit || o.Health != device.Unhealthy || o.Seq == nil {
		t.Fatalf("after growth: %+v", o)
	}

	// The holders leave; the unit's workflow may still fence it, so a form published after that
	// reaches it too.
	for _, name := range []string{"r", "h"} {
		if err := kube.CoreV1().Pods("ns").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "no holder left", func() bool { return len(last().Reporters) == 0 })
	_, regrown := partitionedPool(gpuForm("gpu-0-mig-c", "gpu-0-counters", 1), gpuForm("gpu-0-mig-d", "gpu-0-counters", 1))
	regrown.ResourceVersion = "3"
	if _, err := kube.ResourceV1().ResourceSlices().Update(ctx, regrown, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the unit without holders signalled its new form", func() bool {
		u := last().Unit
		return u != nil && slices.Contains(u.Devices, "gpu-0-mig-d")
	})
}

// The policy decides a driver's units: by a published attribute (the forms of one GPU share a
// parent UUID, whatever counters they draw on), or not at all (independent partitions: each
// report goes to its own device's workflow).
func TestPolicyGroupsUnitsByAttributeOrNotAtAll(t *testing.T) {
	for _, tt := range []struct {
		units, want string
	}{
		{"{attribute: parentUUID}", "parentUUID=G0"},
		{"{independent: true}", "gpu-0-mig-a"},
	} {
		t.Run(tt.units, func(t *testing.T) {
			pols, err := policy.Parse([]byte("drivers:\n  " + drv + ": {identity: [uuid], units: " + tt.units + "}\n"))
			if err != nil {
				t.Fatal(err)
			}
			pool := resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1}
			devs := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-devices"},
				Spec: resourcev1.ResourceSliceSpec{Driver: drv, Pool: pool, NodeName: ptr.To("node-1"), Devices: []resourcev1.Device{
					partitioned("gpu-0", "set-a", "G0"), partitioned("gpu-0-mig-a", "set-b", "G0"), partitioned("gpu-1", "set-a", "G1")}}}
			a, ca := holder("r", "gpu-0-mig-a", "Unhealthy")
			rec := &recorder{}
			w := New(Config{Kube: fake.NewSimpleClientset(devs, a, ca), Signaler: rec, Metrics: metrics.New(), Policies: pols,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
			start(t, w)
			waitUntil(t, "a signal", func() bool { return len(rec.signals()) > 0 })
			if got := rec.signals()[0]; got.Device.Device != tt.want {
				t.Fatalf("signalled %s, want %s", got.Device, tt.want)
			}
		})
	}
}

// A watcher that starts while a unit's workflow runs (a restart, a new leader) re-sends the unit's
// state with its devices, though no Pod holds it, and a form published afterwards still reaches it.
func TestRestartedWatcherResendsARunningUnit(t *testing.T) {
	counters, devs := partitionedPool()
	unit := device.ID{Driver: drv, Pool: "node-1", Device: "counters=gpu-0-counters"}
	kube := fake.NewSimpleClientset(counters, devs)
	rec := &recorder{running: []device.ID{unit}}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
	ctx := start(t, w)
	waitUntil(t, "the running unit re-sent", func() bool { return len(rec.signals()) > 0 })
	o := rec.signals()[0]
	if o.Device != unit || o.Unit == nil || !slices.Equal(o.Unit.Devices, []string{"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b"}) {
		t.Fatalf("re-sent %+v unit %+v", o, o.Unit)
	}
	_, grown := partitionedPool(gpuForm("gpu-0-mig-c", "gpu-0-counters", 1))
	grown.ResourceVersion = "2"
	if _, err := kube.ResourceV1().ResourceSlices().Update(ctx, grown, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the new form sent", func() bool {
		got := rec.signals()
		u := got[len(got)-1].Unit
		return u != nil && slices.Contains(u.Devices, "gpu-0-mig-c")
	})
}
