package watcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
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
	"github.com/devicewarden/devicewarden/internal/policy"
)

// recorder is a Signaler that records observations and can be told to fail.
type recorder struct {
	mu   sync.Mutex
	got  []api.Observation
	fail int // fail this many calls first
	// running are devices whose workflows run when the watcher starts.
	running []device.ID
	// failRunning fails this many RunningDevices calls first.
	failRunning int
}

func (r *recorder) Signal(_ context.Context, obs api.Observation) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail > 0 {
		r.fail--
		return errors.New("temporal unavailable")
	}
	r.got = append(r.got, obs)
	return nil
}

func (r *recorder) RunningDevices(context.Context) ([]device.ID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failRunning > 0 {
		r.failRunning--
		return nil, errors.New("temporal unavailable")
	}
	return r.running, nil
}

func (r *recorder) signals() []api.Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]api.Observation(nil), r.got...)
}

// start runs the watcher until the test ends; Run returning an error fails the test.
func start(t *testing.T, w *Watcher) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return ctx
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A narrow unit test of the event plumbing: the fake clientset stands in for the apiserver only
// to feed the informers. The real apiserver path is proven in internal/e2e.
func TestWatcherCountsBadInputAndSignalsGoodInput(t *testing.T) {
	good := podWith(healthEntry("claim:gpu", "cdi-id", "Unhealthy", nil))
	good.Name = "good"
	oldClient := podWith(healthEntry("claim:gpu", "cdi-id", "Degraded", nil))
	oldClient.Name = "old-client"
	malformed := podWith(healthEntry("claim:direct/a", "not/a/device/id", "Unhealthy", nil))
	malformed.Name = "malformed"
	noClaim := podWith(healthEntry("claim:gpu", "cdi-id", "Unhealthy", nil))
	noClaim.Name = "no-claim"
	noClaim.Status.ResourceClaimStatuses[0].ResourceClaimName = ptrTo("deleted-claim")

	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-1"}, {Name: "gpu-2"}, {Name: "gpu-3"}}}}
	kube := fake.NewSimpleClientset(good, oldClient, malformed, noClaim, slice,
		claimWith("pod-gpu-abc", result("gpus", "gpu-3")),
		claimWith("direct-claim", result("a", "gpu-1"), result("a", "gpu-2")))
	rec := &recorder{fail: 2}
	m := metrics.New()
	w := New(Config{Kube: kube, Signaler: rec, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 2})
	ctx := start(t, w)

	// Temporal fails twice; the queue keeps the device and the signal still arrives once.
	waitUntil(t, "signal", func() bool { return len(rec.signals()) == 1 })
	got := rec.signals()[0]
	if got.Device != (device.ID{Driver: drv, Pool: "node-1", Device: "gpu-3"}) || got.Health != device.Unhealthy {
		t.Fatalf("signalled %+v", got)
	}
	for reason, want := range map[string]float64{ReasonUnknownHealth: 1, ReasonClaimNotFound: 1} {
		if n := testutil.ToFloat64(m.ResolutionFailures.WithLabelValues(reason)); n < want {
			t.Errorf("resolution failures %s = %v, want >= %v", reason, n, want)
		}
	}
	// An ID that could be either device of the claim is not dropped: it is counted and recorded
	// as a Warning Event on the Pod and on the claim.
	waitUntil(t, "ambiguous report recorded", func() bool {
		evs, _ := kube.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		kinds := map[string]bool{}
		for _, e := range evs.Items {
			if e.Reason == EventAmbiguous && strings.Contains(e.Message, drv+"/node-1/gpu-1, "+drv+"/node-1/gpu-2") {
				kinds[e.InvolvedObject.Kind] = true
			}
		}
		return kinds["Pod"] && kinds["ResourceClaim"] && testutil.ToFloat64(m.AmbiguousReports.WithLabelValues(policy.AmbiguousAlert)) >= 1
	})
	if n := testutil.ToFloat64(m.Signals.WithLabelValues("error")); n != 2 {
		t.Errorf("signal errors = %v, want 2", n)
	}

	// The same report under a new resourceVersion (an unrelated status change) does not even
	// reach the queue; a real change right after it is signalled, and nothing else is.
	good2 := good.DeepCopy()
	good2.Status.ContainerStatuses[0].RestartCount = 3
	if _, err := kube.CoreV1().Pods("ns").UpdateStatus(ctx, good2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	good3 := good2.DeepCopy()
	good3.Status.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources[0].Health = "Unknown"
	if _, err := kube.CoreV1().Pods("ns").UpdateStatus(ctx, good3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "second signal", func() bool { return len(rec.signals()) >= 2 })
	time.Sleep(100 * time.Millisecond)
	if got := rec.signals(); len(got) != 2 || got[1].Health != device.Unknown {
		t.Fatalf("signals after an unrelated update and a real change: %+v", got)
	}
	if n := testutil.ToFloat64(m.Deduplicated); n != 0 {
		t.Fatalf("unchanged device went through the queue (%v duplicates)", n)
	}

	// A pod holding thousands of devices is handled, not fatal.
	big := podWith()
	big.Name = "big"
	var entries []corev1.ResourceStatus
	for i := 0; i < 2000; i++ {
		entries = append(entries, healthEntry("claim:direct/a", strings.Repeat("z", 10)+string(rune('a'+i%26)), "Unknown", nil))
	}
	big.Status.ContainerStatuses[0].AllocatedResourcesStatus = entries
	if _, err := kube.CoreV1().Pods("ns").Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "big pod counted", func() bool {
		return testutil.ToFloat64(m.AmbiguousReports.WithLabelValues(policy.AmbiguousAlert)) >= 2001
	})
}

func ptrTo(s string) *string { return &s }

// A device that vanished from its slice while no watcher was running is reported Unknown from the
// state listed at start, before anything else is sent.
func TestMissingAtStartIsReported(t *testing.T) {
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1}, Devices: []resourcev1.Device{{Name: "gpu-1"}}}}
	kube := fake.NewSimpleClientset(slice, claimWith("direct-claim", result("a", "gpu-1"), result("a", "gpu-9")))
	rec := &recorder{}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
	start(t, w)
	waitUntil(t, "signal", func() bool { return len(rec.signals()) == 1 })
	got := rec.signals()[0]
	if got.Device.Device != "gpu-9" || got.Health != device.Unknown || !strings.Contains(got.Message, "disappeared from its ResourceSlice") {
		t.Fatalf("signalled %+v", got)
	}
}

// Temporal that does not answer at start delays the watcher instead of stopping it: once it
// answers, the running workflows are learned and the missing device is reported.
func TestTemporalAwayAtStartDelaysTheWatcher(t *testing.T) {
	kube := fake.NewSimpleClientset()
	rec := &recorder{failRunning: 1, running: []device.ID{{Driver: drv, Pool: "node-1", Device: "gpu-3"}}}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
	start(t, w)
	waitUntil(t, "synced after Temporal answered", w.Synced)
	waitUntil(t, "the running device re-sent", func() bool { return len(rec.signals()) == 1 })
	if got := rec.signals()[0].Device.Device; got != "gpu-3" {
		t.Fatalf("signalled %s, want gpu-3", got)
	}
}
