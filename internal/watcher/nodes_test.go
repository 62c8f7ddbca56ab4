package watcher

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

func node(name string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{
			{Type: "GPUHealthy", Status: corev1.ConditionUnknown},
			{Type: corev1.NodeReady, Status: ready, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.",
				LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0))},
		}
	}
	return n
}

// The node lifecycle controller's Unknown is an outage, decided once; the kubelet's own False
// (it speaks: not an outage), a True, or no Ready condition yet are not.
func TestNodeReadyUnknownIsOneNodeDecision(t *testing.T) {
	o := newNodeOutages()
	for _, ready := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, ""} {
		if down, up := o.put(node("node-1", ready)); down != "" || up {
			t.Fatalf("Ready %q: down %q up %v", ready, down, up)
		}
	}
	down, up := o.put(node("node-1", corev1.ConditionUnknown))
	if !strings.Contains(down, "node node-1 outage: Ready is Unknown since 2023-11-14T22:13:20Z (NodeStatusUnknown: Kubelet stopped posting node status.)") || up {
		t.Fatalf("down %q up %v", down, up)
	}
	if down, up := o.put(node("node-1", corev1.ConditionUnknown)); down != "" || up {
		t.Fatalf("the same outage decided twice: down %q up %v", down, up)
	}
	if down, up := o.put(node("node-1", corev1.ConditionFalse)); down != "" || !up {
		t.Fatalf("a kubelet that speaks again ends the outage: down %q up %v", down, up)
	}
	if down, up := o.put(node("node-1", corev1.ConditionFalse)); down != "" || up {
		t.Fatalf("the outage ended twice: down %q up %v", down, up)
	}
}

// A node deleted in an outage ends it, whether the watch says so or a relist finds it gone; a
// node deleted while up ends nothing.
func TestADeletedNodeEndsItsOutage(t *testing.T) {
	o := newNodeOutages()
	o.put(node("gone", corev1.ConditionUnknown))
	o.put(node("up", corev1.ConditionTrue))
	if !o.remove("gone") || o.remove("gone") || o.remove("up") {
		t.Fatal("remove: want the outage ended once, and nothing for a node that was up")
	}
	o.put(node("a", corev1.ConditionUnknown))
	o.put(node("b", corev1.ConditionUnknown))
	o.relistBegin()
	o.put(node("b", corev1.ConditionUnknown))
	if gone := o.relistEnd(); len(gone) != 1 || gone[0] != "a" {
		t.Fatalf("relist: gone %v, want [a]", gone)
	}
	if gone := o.relistEnd(); len(gone) != 0 {
		t.Fatalf("a sweep outside a relist took %v", gone)
	}
	if down, up := o.put(node("b", corev1.ConditionTrue)); down != "" || !up {
		t.Fatal("the node the relist kept was not in its outage")
	}
}

func TestStoreOutageTurnsFollowedHealthyDevicesUnknown(t *testing.T) {
	s := newStore()
	now := time.Unix(1700000000, 0)
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	s.seed([]device.ID{id}) // a followed device: its workflow runs
	s.setPod("ns/a", "10", []Report{rep("gpu-0", device.Healthy, "a")}, nil, nil, false)
	s.markSignalled(mustNext(t, s, id, now, device.Healthy), now)
	ids := s.setOutage("node-1", "node node-1 outage")
	if len(ids) != 1 || ids[0] != id {
		t.Fatalf("outage affects %v", ids)
	}
	obs, d := s.next(id, now, 0, nil)
	if d != doSignal || obs.Health != device.Unknown || obs.Message != "node node-1 outage" {
		t.Fatalf("during outage: %v %+v", d, obs)
	}
	s.markSignalled(obs, now)
	s.setOutage("node-1", "")
	if obs, d := s.next(id, now, 0, nil); d != doSignal || obs.Health != device.Healthy {
		t.Fatalf("after outage: %v %+v", d, obs)
	}
}

func mustNext(t *testing.T, s *store, id device.ID, now time.Time, h device.Health) (o api.Observation) {
	t.Helper()
	s.mu.Lock()
	e := s.devices[id]
	s.mu.Unlock()
	o = aggregate(id, e, now)
	if o.Health != h {
		t.Fatalf("health %s, want %s", o.Health, h)
	}
	return o
}

// A narrow test of the plumbing (the fake clientset stands in for the apiserver; internal/e2e has
// the real one): a node whose Ready turns Unknown turns the followed device there Unknown, with
// the outage as reason, once; Ready again, or the node deleted, sends its own report's word.
func TestANodeOutageReachesTheDevicesFollowedThere(t *testing.T) {
	pod := podWith(healthEntry("claim:gpu", "cdi-id", "Healthy", nil))
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1}, Devices: []resourcev1.Device{{Name: "gpu-3"}}}}
	kube := fake.NewSimpleClientset(pod, slice, claimWith("pod-gpu-abc", result("gpus", "gpu-3")), node("node-1", corev1.ConditionTrue))
	rec := &recorder{running: []device.ID{{Driver: drv, Pool: "node-1", Device: "gpu-3"}}}
	m := metrics.New()
	w := New(Config{Kube: kube, Signaler: rec, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
	ctx := start(t, w)
	waitUntil(t, "the followed device's Healthy", func() bool { return len(rec.signals()) == 1 })
	ready := func(status corev1.ConditionStatus) {
		t.Helper()
		if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node("node-1", status), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ready(corev1.ConditionUnknown)
	waitUntil(t, "the outage", func() bool { return len(rec.signals()) == 2 })
	if got := rec.signals()[1]; got.Health != device.Unknown || !strings.Contains(got.Message, "node node-1 outage: Ready is Unknown") {
		t.Fatalf("in the outage: %+v", got)
	}
	ready(corev1.ConditionUnknown) // the controller writes again: no news
	ready(corev1.ConditionTrue)
	waitUntil(t, "the end of the outage", func() bool { return len(rec.signals()) == 3 })
	if got := rec.signals()[2]; got.Health != device.Healthy {
		t.Fatalf("after the outage: %+v", got)
	}
	// Down again, then deleted: the outage ends with the node.
	ready(corev1.ConditionUnknown)
	waitUntil(t, "the second outage", func() bool { return len(rec.signals()) == 4 })
	if err := kube.CoreV1().Nodes().Delete(ctx, "node-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the end of the outage with the node", func() bool { return len(rec.signals()) == 5 })
	if got := rec.signals()[4]; got.Health != device.Healthy {
		t.Fatalf("after the node was deleted: %+v", got)
	}
	if n := testutil.ToFloat64(m.NodeOutages); n != 2 {
		t.Fatalf("node outages %v, want 2", n)
	}
	if n := testutil.ToFloat64(m.WatcherEvents.WithLabelValues("node", "update")); n != 4 {
		t.Fatalf("node updates counted %v, want 4", n)
	}
}
