package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/watcher"
)

// A leader whose watcher stops (here: it could not reach Temporal) gives the Lease up at once and
// returns the error, so the process exits and the other replica leads without waiting for expiry.
func TestLeaderWhoseWatcherStopsGivesTheLeaseUp(t *testing.T) {
	kube := fake.NewSimpleClientset()
	le := LeaderElection{Namespace: "default", Name: "devicewarden-watcher", Identity: "replica-a",
		LeaseDuration: time.Hour, RenewDeadline: 40 * time.Minute, RetryPeriod: 100 * time.Millisecond}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	broken := errors.New("list running device workflows: connection refused")
	err := runAsLeader(ctx, kube, le, nil, func(context.Context) error { return broken }, logger)
	if !errors.Is(err, broken) {
		t.Fatalf("runAsLeader = %v, want the watcher's error", err)
	}
	l, err := kube.CoordinationV1().Leases("default").Get(ctx, le.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("lease still held by %q", *h)
	}
	// The other replica takes it at its next try, long before the hour-long Lease would expire.
	le.Identity = "replica-b"
	led := make(chan struct{})
	go func() {
		_ = runAsLeader(ctx, kube, le, nil, func(ctx context.Context) error { close(led); <-ctx.Done(); return nil }, logger)
	}()
	select {
	case <-led:
	case <-time.After(10 * time.Second):
		t.Fatal("the other replica did not lead")
	}
}

func TestReadyz(t *testing.T) {
	r := &readiness{watcher: watcher.New(watcher.Config{}), leaderElected: true}
	code := func() int {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return w.Code
	}
	if code() != http.StatusOK {
		t.Fatal("a follower is not ready")
	}
	var down error
	r.temporal = func(context.Context) error { return down }
	down = errors.New("connection refused")
	if code() != http.StatusServiceUnavailable {
		t.Fatal("a follower that cannot reach Temporal is ready")
	}
	down = nil
	if code() != http.StatusOK {
		t.Fatal("a follower that reaches Temporal again is not ready")
	}
	r.leading.Store(true)
	if code() != http.StatusServiceUnavailable {
		t.Fatal("a leader whose watcher has not synced is ready")
	}
	r.stopped.Store(true)
	if code() != http.StatusServiceUnavailable {
		t.Fatal("a stopped watcher is ready")
	}
}

// Temporal unreachable while a replica starts: the replica keeps running and retrying, live but
// not ready with the reason, and never campaigns for the Lease, so a replica that can reach
// Temporal leads. It stops when told to, without an error.
func TestTemporalUnreachableAtStartWaitsWithoutALease(t *testing.T) {
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"}) // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	kube := fake.NewSimpleClientset()
	ctx, cancel := context.WithCancel(context.Background())
	le := &LeaderElection{Namespace: "default", Name: "devicewarden-watcher", Identity: "a",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	done := make(chan error, 1)
	go func() {
		done <- RunController(ctx, kube, tc, ControllerOptions{Workers: 1, LeaderElection: le, MetricsListener: ln}, metrics.New(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Past the first attempt and its retry (1 s backoff).
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "starting: reach temporal (attempt 2)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q, want 503 naming the second attempt to reach Temporal", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("RunController returned while Temporal was away: %v", err)
	default:
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while waiting for Temporal = %d %q, want 200 (a restart would not help)", code, body)
	}
	if leases, _ := kube.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); len(leases.Items) != 0 {
		t.Fatalf("took a Lease: %+v", leases.Items)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunController after its context ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunController did not stop")
	}
}

// A leader whose Lease renewal hangs fails /healthz once the renewal is a Lease duration plus the
// watchdog timeout late, so the kubelet restarts it; before that it is healthy.
func TestHealthzFailsWhileTheLeaderCannotRenew(t *testing.T) {
	kube := fake.NewSimpleClientset()
	le := LeaderElection{Namespace: "default", Name: "devicewarden-watcher", Identity: "replica-a",
		LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	live := liveness{leader: leaderelection.NewLeaderHealthzAdaptor(200 * time.Millisecond)}
	code := live.code
	// Once hanging is set, every renewal hangs (as on a wedged connection).
	var hanging atomic.Bool
	hang := make(chan struct{})
	kube.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !hanging.Load() {
			return false, nil, nil
		}
		<-hang
		return true, nil, errors.New("hung")
	})
	ctx, cancel := context.WithCancel(context.Background())
	led := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = runAsLeader(ctx, kube, le, live.leader, func(ctx context.Context) error { close(led); <-ctx.Done(); return nil },
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	<-led
	if c := code(); c != http.StatusOK {
		t.Fatalf("a leader that renews: /healthz %d", c)
	}
	hanging.Store(true)
	t.Cleanup(func() { close(hang); cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for code() == http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still ok while the leader cannot renew: %v", live.leader.Check(nil))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c := (liveness{}).code(); c != http.StatusOK {
		t.Fatalf("without leader election: /healthz %d", c)
	}
}

func (l liveness) code() int {
	w := httptest.NewRecorder()
	l.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return w.Code
}
