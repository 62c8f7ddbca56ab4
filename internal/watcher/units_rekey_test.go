package watcher

import (
	"io"
	"log/slog"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// A unit's key can change while its workflow fences it: the driver renames gpu-0's counter set,
// or a new form draws on gpu-0's set and gpu-1's at once, which makes one unit of both. The old
// key's workflow still fences gpu-0's forms, and must hear of the forms published under the new
// key; nothing else would fence them until a report started the new key's workflow.
func TestAUnitWhoseKeyChangedHearsOfItsNewForms(t *testing.T) {
	for _, tt := range []struct {
		name    string
		regroup func(counters, devs *resourcev1.ResourceSlice)
		want    []string
	}{
		{"counter set renamed", func(counters, devs *resourcev1.ResourceSlice) {
			counters.Spec.SharedCounters[0].Name = "gpu-0-renamed"
			for i := range devs.Spec.Devices {
				if c := &devs.Spec.Devices[i].ConsumesCounters[0]; c.CounterSet == "gpu-0-counters" {
					c.CounterSet = "gpu-0-renamed"
				}
			}
			devs.Spec.Devices = append(devs.Spec.Devices, gpuForm("gpu-0-mig-c", "gpu-0-renamed", 1))
		}, []string{"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b", "gpu-0-mig-c"}},
		{"a form joins two sets", func(_, devs *resourcev1.ResourceSlice) {
			both := gpuForm("gpu-01-link", "gpu-0-counters", 1)
			both.ConsumesCounters = append(both.ConsumesCounters, resourcev1.DeviceCounterConsumption{CounterSet: "gpu-1-counters",
				Counters: map[string]resourcev1.Counter{"slices": {Value: *resource.NewQuantity(1, resource.DecimalSI)}}})
			devs.Spec.Devices = append(devs.Spec.Devices, both)
		}, []string{"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b", "gpu-01-link", "gpu-1", "gpu-1-mig-a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			counters, devs := partitionedPool()
			a, ca := holder("r", "gpu-0-mig-a", "Unhealthy")
			kube := fake.NewSimpleClientset(counters, devs, a, ca)
			rec := &recorder{}
			w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
			ctx := start(t, w)
			old := device.ID{Driver: drv, Pool: "node-1", Device: "counters=gpu-0-counters"}
			lastOf := func(id device.ID) *api.Observation {
				var out *api.Observation
				for _, o := range rec.signals() {
					if o.Device == id {
						o := o
						out = &o
					}
				}
				return out
			}
			waitUntil(t, "gpu-0's unit signalled Unhealthy", func() bool {
				o := lastOf(old)
				return o != nil && o.Health == device.Unhealthy
			})

			tt.regroup(counters, devs)
			for _, s := range []*resourcev1.ResourceSlice{counters, devs} {
				s.ResourceVersion = "2"
				if _, err := kube.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitUntil(t, "the old key's workflow told of every form under the new key", func() bool {
				o := lastOf(old)
				return o.Unit != nil && slices.Equal(o.Unit.Devices, tt.want)
			})
			if o := lastOf(old); o.Unit.ID.Key != old.Device {
				t.Fatalf("the unit's ID changed under its workflow: %+v", o.Unit.ID)
			}
		})
	}
}
