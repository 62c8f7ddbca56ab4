package watcher

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func TestNamedGPUs(t *testing.T) {
	sig := policy.DefaultSignals()
	for msg, want := range map[string]string{
		"XID 79 on GPU-0a1b2c3d-0000-1111-2222-333344445555 (PCI 0000:3b:00.0)": "uuid=GPU-0a1b2c3d-0000-1111-2222-333344445555",
		"Xid 48 detected on GPU 3":                     "index=3",
		"GPU index 05 is missing; gpu#7 throttled":     "index=5 index=7",
		"XidCriticalError: {\"31\":true}":              "",
		"NVLink inactive between GPU2 and GPU 2, GPU1": "index=2 index=1",
	} {
		var got []string
		for _, a := range NamedGPUs(msg, sig) {
			got = append(got, a.Name+"="+a.Value)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%q: %v, want %q", msg, got, want)
		}
	}
}

type nodeRecorder struct {
	mu  sync.Mutex
	got []escalation.NodeFailure
}

func (n *nodeRecorder) DeviceFailed(_ context.Context, f escalation.NodeFailure) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, f)
	return nil
}

func (n *nodeRecorder) failures() []escalation.NodeFailure {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got)
}

// A node condition that names a GPU is that GPU's fault, sent once; one that names none goes to
// the node's workflow and fences nothing; one that stood long before the watcher started is no
// news.
func TestNodeConditions(t *testing.T) {
	gpu := func(name, uuid string, index int64) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid": {StringValue: ptr.To(uuid)}, "index": {IntValue: ptr.To(index)}}}
	}
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, NodeName: ptr.To("node-1"), Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{gpu("gpu-0", "GPU-0a1b2c3d-0000-1111-2222-333344445555", 0), gpu("gpu-1", "GPU-bbbbbbbb-0000-1111-2222-333344445555", 1)}}}
	now := time.Now()
	cond := func(typ, msg string, at time.Time) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: corev1.ConditionTrue, Reason: "Detected", Message: msg, LastTransitionTime: metav1.NewTime(at)}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		cond("GPUMissing", "GPU index 1 fell off the bus", now.Add(-time.Hour)), // stood long before: no news
	}}}
	kube := fake.NewSimpleClientset(slice, node)
	rec, nodes := &recorder{}, &nodeRecorder{}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 2, Nodes: nodes, WithdrawAfter: 10 * time.Millisecond})
	ctx := start(t, w)
	time.Sleep(100 * time.Millisecond)
	if n := len(rec.signals()); n != 0 {
		t.Fatalf("an old condition was acted on: %+v", rec.signals())
	}
	node.Status.Conditions = []corev1.NodeCondition{
		cond("XIDErrors", "Xid 79 on GPU-0a1b2c3d-0000-1111-2222-333344445555", now),
		cond("XidCriticalError", `{"31":true}`, now),
		cond("GPUMissing", "GPU index 1 fell off the bus", now.Add(-time.Hour)),
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Message: "GPU 1 is fine"},
	}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the GPU's fault sent, then withdrawn", func() bool { return len(rec.signals()) == 2 })
	if got := rec.signals()[0]; got.Device != (device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}) || got.Health != device.Unhealthy ||
		len(got.Reporters) != 1 || got.Reporters[0].Detector != "npd" || !strings.Contains(got.Message, "npd: XIDErrors") {
		t.Fatalf("signalled %+v", got)
	}
	waitUntil(t, "the node's word", func() bool { return len(nodes.failures()) == 1 })
	if f := nodes.failures()[0]; f.Node != "node-1" || f.Device != "" || f.Condition != "XidCriticalError" {
		t.Fatalf("node failure %+v", f)
	}
	// Another update of the node (a heartbeat) with the same conditions is no news.
	node.Labels = map[string]string{"touched": "yes"}
	if _, err := kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n, m := len(rec.signals()), len(nodes.failures()); n != 2 || m != 1 {
		t.Fatalf("the same conditions again: %d signals, %d node words", n, m)
	}
	// The detector rewrites the message while the condition stands (a count): no new fault. A
	// GPU it names for the first time is one.
	node.Status.Conditions[0].Message = "Xid 79 on GPU-0a1b2c3d-0000-1111-2222-333344445555 (3 times)"
	node.Status.Conditions[1].Message = `{"31":true,"43":true}`
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n, m := len(rec.signals()), len(nodes.failures()); n != 2 || m != 1 {
		t.Fatalf("a rewritten message: %d signals, %d node words", n, m)
	}
	node.Status.Conditions[0].Message = "Xid 79 on GPU-0a1b2c3d-0000-1111-2222-333344445555 and GPU-bbbbbbbb-0000-1111-2222-333344445555"
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second GPU's fault", func() bool { return len(rec.signals()) == 4 })
	if got := rec.signals()[2]; got.Device.Device != "gpu-1" || got.Health != device.Unhealthy {
		t.Fatalf("signalled %+v", got)
	}
}

// A condition that turned True a minute before a new leader started is sent again (the new
// leader cannot know what its predecessor delivered), but with the word its predecessor sent,
// even after the detector rewrote the message: the device's workflow took that word and lets it
// pass (decide.Rules.TakenWords). A new transition is a new word.
func TestANewLeaderSendsTheWordItsPredecessorSent(t *testing.T) {
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, NodeName: ptr.To("node-1"), Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid": {StringValue: ptr.To("GPU-0a1b2c3d-0000-1111-2222-333344445555")}}}}}}
	at := metav1.NewTime(time.Now().Add(-time.Minute))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: "XIDErrors", Status: corev1.ConditionTrue, Reason: "Detected", LastTransitionTime: at,
		Message: "Xid 79 on GPU-0a1b2c3d-0000-1111-2222-333344445555"}}}}
	kube := fake.NewSimpleClientset(slice, node)
	lead := func() []string {
		t.Helper()
		rec := &recorder{}
		w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 2, WithdrawAfter: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		defer func() { cancel(); <-done }()
		waitUntil(t, "the condition's fault", func() bool { return len(rec.signals()) > 0 })
		return rec.signals()[0].Words
	}
	first := lead()
	node.Status.Conditions[0].Message += " (3 times)"
	if _, err := kube.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	again := lead()
	if len(first) != 1 || !slices.Equal(first, again) {
		t.Fatalf("the predecessor sent words %v, the new leader %v", first, again)
	}
	node.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at.Add(30 * time.Second))
	if _, err := kube.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if next := lead(); len(next) != 1 || next[0] == first[0] {
		t.Fatalf("a new transition sent words %v, the first %v", next, first)
	}
}
