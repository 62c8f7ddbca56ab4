package watcher

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Tests written against mutants that lived (gremlins): each pins a boundary or a branch.

func TestClaimConditionHealth(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason}
	}
	tests := []struct {
		name   string
		conds  []metav1.Condition
		health device.Health
		msg    string
	}{
		{"none", nil, device.Healthy, ""},
		{"other types say nothing", []metav1.Condition{cond("Allocated", metav1.ConditionFalse, "x"), cond("Prepared", metav1.ConditionUnknown, "y")}, device.Healthy, ""},
		{"healthy true", []metav1.Condition{cond("Healthy", metav1.ConditionTrue, "ok")}, device.Healthy, ""},
		{"the first of equal severity is kept", []metav1.Condition{cond("Ready", metav1.ConditionFalse, "first"), cond("Healthy", metav1.ConditionUnknown, "second")},
			device.Unknown, "claim device condition Ready=False: first "},
		{"the worst wins", []metav1.Condition{cond("Ready", metav1.ConditionFalse, "slow"), cond("Healthy", metav1.ConditionFalse, "xid")},
			device.Unhealthy, "claim device condition Healthy=False: xid "},
	}
	for _, tt := range tests {
		h, msg := conditionHealth(tt.conds)
		if h != tt.health || msg != tt.msg {
			t.Errorf("%s: %s %q, want %s %q", tt.name, h, msg, tt.health, tt.msg)
		}
	}
}

func TestClaimRefsSkipsUnresolvedTemplateClaims(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
		{Name: "direct", ResourceClaimName: ptrTo("shared-claim")},
		{Name: "gpu", ResourceClaimTemplateName: ptrTo("tmpl")}, // no claim made for it yet
	}}}
	if got := ClaimRefs(pod); len(got) != 1 || got[0] != "ns/shared-claim" {
		t.Fatalf("claim refs %v", got)
	}
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptrTo("p-gpu-x")}}
	if got := ClaimRefs(pod); len(got) != 2 || got[1] != "ns/p-gpu-x" {
		t.Fatalf("claim refs %v", got)
	}
}

// A slice's upsert keeps the taints of exactly the tainted devices and the declared attributes of
// exactly the devices that publish them.
func TestSliceUpsertKeepsOnlyWhatMatters(t *testing.T) {
	pols, err := policy.Parse([]byte("drivers:\n  " + drv + ":\n    identity: [index]\n    cdi: attribute:uuid\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{Kube: fake.NewClientset(), Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Policies: pols})
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1}, NodeName: ptr.To("node-1"),
		Devices: []resourcev1.Device{
			{Name: "gpu-0", Taints: []resourcev1.DeviceTaint{{Key: "xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoSchedule}}},
			{Name: "gpu-1", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"uuid": {StringValue: ptr.To("GPU-1")}}},
		}}}
	sliceReader{w}.source().upsert(s, "add")
	taints := w.slices.taints["node-1-gpu"].devices
	if len(taints) != 1 || taints["gpu-0"] == "" {
		t.Fatalf("taints %v: only gpu-0 is tainted", taints)
	}
	gpu := func(n string) device.ID { return device.ID{Driver: drv, Pool: "node-1", Device: n} }
	if v, ok := w.slices.attribute(gpu("gpu-1"), "uuid"); !ok || v != "GPU-1" {
		t.Fatalf("gpu-1 uuid %q %v", v, ok)
	}
	if _, ok := w.slices.attrs[gpu("gpu-0")]; ok {
		t.Fatal("gpu-0 publishes no uuid, yet has attributes kept")
	}
}

// A report whose claim is not known yet is kept with its Pod; the claim's arrival resolves it.
func TestReportWaitsForItsClaim(t *testing.T) {
	pod := podWith(healthEntry("claim:gpu", "cdi-id", "Unhealthy", nil))
	kube := fake.NewClientset(pod)
	rec := &recorder{}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
	ctx := start(t, w)
	waitUntil(t, "the unresolved report counted", func() bool {
		return testutil.ToFloat64(w.cfg.Metrics.ResolutionFailures.WithLabelValues(ReasonClaimNotFound)) >= 1
	})
	if n := len(rec.signals()); n != 0 {
		t.Fatalf("signalled %d times without a claim", n)
	}
	if _, err := kube.ResourceV1().ResourceClaims("ns").Create(ctx, claimWith("pod-gpu-abc", result("gpus", "gpu-3")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "signal once the claim arrived", func() bool { return len(rec.signals()) == 1 })
	if got := rec.signals()[0]; got.Device.Device != "gpu-3" || got.Health != device.Unhealthy {
		t.Fatalf("signalled %+v", got)
	}
}

// Adopting a claim's holders looks at exactly its Pod consumers that exist.
func TestAdoptHolders(t *testing.T) {
	c := claimWith("shared", result("gpus", "gpu-3"))
	c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "deployments", Name: "web"}, {Resource: "pods", Name: "gone"}, {Resource: "pods", Name: "pod"}}
	pod := podWith()
	w := New(Config{Kube: fake.NewClientset(c, pod), Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	w.adoptHolders("ns/shared")
	if n := testutil.ToFloat64(w.cfg.Metrics.WatcherEvents.WithLabelValues("pod", "adopt")); n != 1 {
		t.Fatalf("adopted %v pods, want the one that exists", n)
	}
	w.adoptHolders("ns/missing-claim")
	if n := testutil.ToFloat64(w.cfg.Metrics.WatcherEvents.WithLabelValues("pod", "adopt")); n != 1 {
		t.Fatalf("a missing claim adopted pods: %v", n)
	}
}

func TestConfigDefaults(t *testing.T) {
	w := New(Config{})
	c := w.cfg
	if c.Workers != 8 || c.HeartbeatInterval != 2*time.Minute || c.ReportAgeInterval != 2*time.Second || c.Policies == nil || c.Logger == nil || c.Clock == nil {
		t.Fatalf("defaults %+v", c)
	}
	w = New(Config{Workers: 3, HeartbeatInterval: time.Second, ReportAgeInterval: time.Millisecond})
	if w.cfg.Workers != 3 || w.cfg.HeartbeatInterval != time.Second || w.cfg.ReportAgeInterval != time.Millisecond {
		t.Fatalf("set values replaced: %+v", w.cfg)
	}
}

// Several reports of one device: the worst health wins, ties go to the greatest message (so the
// choice does not depend on map order), and the winner's node and class come with it.
func TestAggregateChoosesTheWorstReport(t *testing.T) {
	s := newStore()
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	now := time.Unix(1700000000, 0)
	with := func(h device.Health, pod, msg, node, class string) Report {
		r := rep("gpu-0", h, pod)
		r.Message, r.Node, r.DeviceClass = msg, node, class
		return r
	}
	s.setPod("ns/a", "10", []Report{with(device.Unknown, "a", "zzz restarting", "node-a", "class-a")}, nil, nil, false)
	s.setPod("ns/b", "11", []Report{with(device.Unhealthy, "b", "XID 48", "node-b", "class-b")}, nil, nil, false)
	s.setPod("ns/c", "12", []Report{with(device.Unhealthy, "c", "XID 79", "node-c", "class-c")}, nil, nil, false)
	s.setPod("ns/d", "13", []Report{with(device.Unhealthy, "d", "XID 13", "node-d", "class-d")}, nil, nil, false)
	obs, d := s.next(id, now, 0, nil)
	if d != doSignal || obs.Health != device.Unhealthy || obs.Message != "XID 79" || obs.Node != "node-c" || obs.DeviceClass != "class-c" || len(obs.Reporters) != 4 {
		t.Fatalf("%v %+v", d, obs)
	}
}

// The claim index: request classes of exact and firstAvailable requests, which claim holds a
// device, and a deleted claim forgotten.
func TestClaimIndex(t *testing.T) {
	c := claimWith("train", result("gpus/big", "gpu-3"))
	c.Spec.Devices.Requests = []resourcev1.DeviceRequest{
		{Name: "nic", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "nic.example.com"}},
		{Name: "gpus", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "big", DeviceClassName: "big.gpu.example.com"}, {Name: "small", DeviceClassName: "small.gpu.example.com"}}},
	}
	x := newClaimIndex()
	key, cl := x.put(c)
	if key != "ns/train" || cl.class("nic") != "nic.example.com" || cl.class("gpus/big") != "big.gpu.example.com" || cl.class("gpus/small") != "small.gpu.example.com" || cl.class("other") != "" {
		t.Fatalf("classes %+v", cl.Classes)
	}
	gpu3 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-3"}
	if got := x.holding(gpu3); got != "ns/train" {
		t.Fatalf("holding gpu-3: %q", got)
	}
	if got := x.holding(device.ID{Driver: drv, Pool: "node-1", Device: "gpu-4"}); got != "" {
		t.Fatalf("holding gpu-4: %q", got)
	}
	if got := x.delete(c); got != "ns/train" || x.holding(gpu3) != "" {
		t.Fatalf("after delete: key %q, holder %q", got, x.holding(gpu3))
	}
	if _, ok := x.get("ns", "train"); ok {
		t.Fatal("a deleted claim is still known")
	}
}
