package watcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// The per-fault costs that could grow with the fleet, at 250, 500 and 1,000 nodes of 8 GPUs,
// each GPU held by a claim of its own: a detector's fault looks up the device's class and its
// holders, and a report that names a device by its DRA name is resolved to it and its node.
var fleetNodes = []int{250, 500, 1000}

// fleetWatcher is a watcher that knows nodes nodes of 8 GPUs, their slices in its slice index
// and in the apiserver (client-go's fake), and one claim per GPU.
func fleetWatcher(b *testing.B, nodes int) *Watcher {
	b.Helper()
	var objs []runtime.Object
	for n := range nodes {
		node := fmt.Sprintf("node-%d", n)
		s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourcev1.ResourceSliceSpec{Driver: drv, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
		for g := range 8 {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", g)})
		}
		objs = append(objs, s)
	}
	w := New(Config{Kube: fake.NewClientset(objs...), Signaler: &counter{}, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, o := range objs {
		s := o.(*resourcev1.ResourceSlice)
		w.slices.set(s.Name, sliceInfoOf(s, policy.DefaultSet(), &w.slices.intern))
		for g := range 8 {
			c := claimWith(fmt.Sprintf("%s-gpu-%d", s.Spec.Pool.Name, g), resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: drv, Pool: s.Spec.Pool.Name, Device: fmt.Sprintf("gpu-%d", g)})
			c.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}
			w.claims.put(c)
		}
	}
	return w
}

// BenchmarkDetectorFaultLookups is what a detector's fault asks of the claims: the device's
// class and the claims holding it.
func BenchmarkDetectorFaultLookups(b *testing.B) {
	for _, nodes := range fleetNodes {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			w := fleetWatcher(b, nodes)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				id := device.ID{Driver: drv, Pool: fmt.Sprintf("node-%d", i%nodes), Device: fmt.Sprintf("gpu-%d", i%8)}
				if w.claims.classOf(id) != "gpu.example.com" || len(w.claims.holdingAny([]device.ID{id})) != 1 {
					b.Fatalf("%s: class %q", id, w.claims.classOf(id))
				}
				i++
			}
		})
	}
}

// BenchmarkReportByName resolves a DeviceHealthReport that names its device by its DRA name.
func BenchmarkReportByName(b *testing.B) {
	for _, nodes := range fleetNodes {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			w := fleetWatcher(b, nodes)
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				pool := fmt.Sprintf("node-%d", i%nodes)
				spec := healthreport.Spec{Device: &healthreport.DeviceRef{Driver: drv, Pool: pool, Name: fmt.Sprintf("gpu-%d", i%8)}, Health: "Unhealthy", Source: "bench"}
				if _, node, err := w.resolveReport(ctx, spec); err != nil || node != pool {
					b.Fatalf("%v %q", err, node)
				}
				i++
			}
		})
	}
}
