package watcher

import (
	"io"
	"log/slog"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// A driver's Healthy=False condition in a claim's status reports the device Unhealthy (its other
// device stays silent); the condition clearing is reported once as the driver's word that it is
// Healthy again, and a claim without conditions says nothing.
func TestClaimConditionReportedAndWithdrawn(t *testing.T) {
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-1"}, {Name: "gpu-2"}, {Name: "gpu-3"}}}}
	claim := claimWith("cond-claim", result("a", "gpu-1"), result("a", "gpu-2"))
	claim.Status.Devices = []resourcev1.AllocatedDeviceStatus{{Driver: drv, Pool: "node-1", Device: "gpu-1",
		Conditions: []metav1.Condition{{Type: "Healthy", Status: metav1.ConditionFalse, Reason: "ECC"}}}}
	quiet := claimWith("quiet-claim", result("a", "gpu-3"))
	kube := fake.NewSimpleClientset(slice, claim, quiet)
	rec := &recorder{}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 2})
	ctx := start(t, w)
	gpu1 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	waitUntil(t, "the condition reported", func() bool { return len(rec.signals()) == 1 })
	if got := rec.signals()[0]; got.Device != gpu1 || got.Health != device.Unhealthy || got.Source != devicemsg.SourceClaimCondition {
		t.Fatalf("signalled %+v", got)
	}
	cleared := claim.DeepCopy()
	cleared.Status.Devices = nil
	if _, err := kube.ResourceV1().ResourceClaims("ns").UpdateStatus(ctx, cleared, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the condition withdrawn", func() bool { return len(rec.signals()) == 2 })
	if got := rec.signals()[1]; got.Device != gpu1 || got.Health != device.Healthy || got.Source != devicemsg.SourceClaimCondition {
		t.Fatalf("after the condition cleared: %+v", got)
	}
	for _, s := range rec.signals() {
		if s.Device.Device != "gpu-1" {
			t.Fatalf("a device without a condition was signalled: %+v", s)
		}
	}
}

// Of two devices a claim's conditions mark, the one whose condition clears is reported Healthy on
// the driver's word while the other stays reported.
func TestClaimConditionOneOfTwoClears(t *testing.T) {
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-1"}, {Name: "gpu-2"}}}}
	bad := func(dev string) resourcev1.AllocatedDeviceStatus {
		return resourcev1.AllocatedDeviceStatus{Driver: drv, Pool: "node-1", Device: dev,
			Conditions: []metav1.Condition{{Type: "Healthy", Status: metav1.ConditionFalse, Reason: "ECC"}}}
	}
	claim := claimWith("two", result("a", "gpu-1"), result("a", "gpu-2"))
	claim.Status.Devices = []resourcev1.AllocatedDeviceStatus{bad("gpu-1"), bad("gpu-2")}
	kube := fake.NewSimpleClientset(slice, claim)
	rec := &recorder{}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 2})
	ctx := start(t, w)
	waitUntil(t, "both reported", func() bool { return len(rec.signals()) == 2 })
	one := claim.DeepCopy()
	one.Status.Devices = []resourcev1.AllocatedDeviceStatus{bad("gpu-1")}
	if _, err := kube.ResourceV1().ResourceClaims("ns").UpdateStatus(ctx, one, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "gpu-2 cleared", func() bool { return len(rec.signals()) == 3 })
	if got := rec.signals()[2]; got.Device.Device != "gpu-2" || got.Health != device.Healthy || got.Source != devicemsg.SourceClaimCondition {
		t.Fatalf("after gpu-2's condition cleared: %+v", got)
	}
}
