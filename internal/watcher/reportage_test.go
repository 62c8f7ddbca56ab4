package watcher

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/metrics"
)

// manualClock is a clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (r *recorder) setFail(n int) { r.mu.Lock(); defer r.mu.Unlock(); r.fail = n }

// While Temporal refuses the heartbeat, the oldest delivered report ages in the gauge the
// stale-reports alert reads; the next delivered heartbeat brings it back to zero.
func TestReportAgeGrowsWhileHeartbeatsFail(t *testing.T) {
	pod := podWith(healthEntry("claim:gpu", "cdi-id", "Unhealthy", nil))
	kube := fake.NewSimpleClientset(pod, claimWith("pod-gpu-abc", result("gpus", "gpu-3")))
	rec := &recorder{}
	m := metrics.New()
	clock := &manualClock{now: time.Unix(1700000000, 0)}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1,
		Clock: clock.Now, HeartbeatInterval: 50 * time.Millisecond, ReportAgeInterval: 10 * time.Millisecond})
	start(t, w)
	waitUntil(t, "first signal", func() bool { return len(rec.signals()) == 1 })
	if age := testutil.ToFloat64(m.ReportAge); age != 0 {
		t.Fatalf("age right after delivery = %v, want 0", age)
	}

	rec.setFail(1 << 30)
	clock.Add(9 * time.Minute)
	waitUntil(t, "a refused heartbeat", func() bool { return testutil.ToFloat64(m.Signals.WithLabelValues("error")) > 0 })
	waitUntil(t, "age of the refused heartbeat", func() bool { return testutil.ToFloat64(m.ReportAge) == 540 })

	rec.setFail(0)
	waitUntil(t, "heartbeat delivered", func() bool { return testutil.ToFloat64(m.ReportAge) == 0 })
	if len(rec.signals()) < 2 {
		t.Fatalf("age went back to 0 without a delivered heartbeat: %d signals", len(rec.signals()))
	}
}
