package watcher

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A report that names its device by its DRA name is resolved from the slices the watcher
// watches, with no list of the driver's slices; one whose device the watch has not shown yet is
// looked for in the apiserver; one that names no published device is refused.
func TestAReportByNameIsResolvedFromTheWatch(t *testing.T) {
	slice := func(node string, devs ...string) *resourcev1.ResourceSlice {
		s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourcev1.ResourceSliceSpec{Driver: drv, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
		for _, d := range devs {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d})
		}
		return s
	}
	watched, unseen := slice("node-1", "gpu-0", "gpu-1"), slice("node-2", "gpu-0")
	kube := fake.NewClientset(watched, unseen)
	w := New(Config{Kube: kube, Signaler: &counter{}, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	w.slices.set(watched.Name, sliceInfoOf(watched, policy.DefaultSet(), &w.slices.intern))
	byName := func(pool, dev string) healthreport.Spec {
		return healthreport.Spec{Device: &healthreport.DeviceRef{Driver: drv, Pool: pool, Name: dev}, Health: "Unhealthy", Source: "test"}
	}
	lists := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "resourceslices" {
				n++
			}
		}
		return n
	}
	ctx := context.Background()
	id, node, err := w.resolveReport(ctx, byName("node-1", "gpu-1"))
	if err != nil || id.Device != "gpu-1" || node != "node-1" || lists() != 0 {
		t.Fatalf("from the watch: %v %q %v, %d lists", id, node, err, lists())
	}
	id, node, err = w.resolveReport(ctx, byName("node-2", "gpu-0"))
	if err != nil || id.Pool != "node-2" || node != "node-2" || lists() != 1 {
		t.Fatalf("not watched yet: %v %q %v, %d lists", id, node, err, lists())
	}
	if _, _, err := w.resolveReport(ctx, byName("node-1", "gpu-7")); err == nil || !strings.Contains(err.Error(), "no such device") {
		t.Fatalf("no such device: %v", err)
	}
}
