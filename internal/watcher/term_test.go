package watcher

import (
	"context"
	"io"
	"log/slog"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// Each watcher that starts takes a larger term than every one before it, from the counter in the
// Lease, which the first one creates; a counter left by earlier watchers goes on from where it is.
func TestLeaseTermCounts(t *testing.T) {
	kube := fake.NewClientset()
	next := LeaseTerm(kube, "devicewarden", TermLease)
	for want := TermBase + 1; want <= TermBase+3; want++ {
		got, err := next(context.Background())
		if err != nil || got != want {
			t.Fatalf("term = %d, %v; want %d", got-TermBase, err, want-TermBase)
		}
	}
	other := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "devicewarden", Name: TermLease},
		Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](41)}})
	if got, err := LeaseTerm(other, "devicewarden", TermLease)(context.Background()); err != nil || got != TermBase+42 {
		t.Fatalf("after 41 watchers: term %d, %v; want 42", got-TermBase, err)
	}
}

// Every counted term orders after a term an older watcher took from the clock, so a device its
// workflow last heard from such a watcher hears the first counted one.
func TestCountedTermsFollowClockTerms(t *testing.T) {
	clock := devicemsg.Seq{Term: 1_800_000_000_000_000_000, N: 99} // UnixNano in 2027
	counted := devicemsg.Seq{Term: TermBase + 1, N: 1}
	if !clock.Before(counted) {
		t.Fatalf("%+v does not order before %+v", clock, counted)
	}
}

// A watcher stamps its observations with the term it took as it started, counting from 1, and
// waits for a term while the counter cannot be read.
func TestWatcherStampsTheTermItTook(t *testing.T) {
	kube := fake.NewSimpleClientset(podWith(healthEntry("claim:gpu", "cdi-id", "Unhealthy", nil)),
		claimWith("pod-gpu-abc", result("gpus", "gpu-3")))
	rec := &recorder{}
	calls := 0
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1,
		Term: func(context.Context) (int64, error) {
			if calls++; calls == 1 {
				return 0, context.DeadlineExceeded
			}
			return TermBase + 7, nil
		}})
	start(t, w)
	waitUntil(t, "signal", func() bool { return len(rec.signals()) == 1 })
	got := rec.signals()[0]
	if got.Seq == nil || got.Seq.Term != TermBase+7 || got.Seq.N != 1 {
		t.Fatalf("seq %+v, want term %d, n 1", got.Seq, TermBase+7)
	}
	if got.Device != (device.ID{Driver: drv, Pool: "node-1", Device: "gpu-3"}) {
		t.Fatalf("device %s", got.Device)
	}
}
