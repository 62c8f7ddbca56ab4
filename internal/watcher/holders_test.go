package watcher

import (
	"io"
	"log/slog"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// A detector's fault about a GPU whose Pod says nothing of it: the Pod is taken in as the
// device's holder before the fault's word is withdrawn, so the workflow hears of the Pod (to move
// it) and the device's class (its policy). Were the holder looked for after the withdrawal, the
// device would no longer be followed and the Pod passed over.
func TestADetectorsFaultFindsTheSilentHolder(t *testing.T) {
	slice := uuidSlice()
	pod, claim := holder("train", "gpu-1", "Healthy")
	pod.Status.ContainerStatuses[0].AllocatedResourcesStatus = nil // kubelet says nothing of the device
	claim.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "repair.gpu"}}}
	kube := fake.NewSimpleClientset(slice, pod, claim)
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{GroupVersion: healthreport.Group + "/" + healthreport.Version,
		APIResources: []metav1.APIResource{{Name: healthreport.Resource, Kind: healthreport.Kind}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{reportGVR: healthreport.Kind + "List"},
		healthReport("xid", byUUID("GPU-bbbb", "Unhealthy", "nvsentinel")))
	rec := &recorder{}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1,
		Reports: dyn.Resource(reportGVR), WithdrawAfter: 10 * time.Millisecond})
	start(t, w)
	waitUntil(t, "the fault, then its holder", func() bool { return len(rec.signals()) >= 2 })
	first, next := rec.signals()[0], rec.signals()[1]
	if first.Health != device.Unhealthy || first.DeviceClass != "repair.gpu" || len(first.Reporters) != 1 || first.Reporters[0].Report != "xid" {
		t.Fatalf("the fault %+v", first)
	}
	if len(next.Reporters) != 1 || next.Reporters[0].Pod != "train" || !next.Reporters[0].Silent || next.Health != device.Healthy {
		t.Fatalf("after the fault's word was withdrawn: %+v", next)
	}
}
