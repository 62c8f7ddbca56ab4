package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/devicewarden/devicewarden/internal/watcher"
)

// runAsLeader runs fn while this replica holds the Lease. Losing the Lease is an error: the process
// exits and restarts rather than risk two watchers signalling at once. A watcher that stops (it
// could not reach Temporal at start, a source failed) gives the Lease up at once, so the other
// replica takes over instead of waiting for a Lease held by a replica that watches nothing.
// watchdog (may be nil) is told about the elector, so /healthz fails while this replica leads
// without renewing.
func runAsLeader(ctx context.Context, kube kubernetes.Interface, le LeaderElection, watchdog *leaderelection.HealthzAdaptor, fn func(context.Context) error, logger *slog.Logger) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: le.Name, Namespace: le.Namespace},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	electCtx, release := context.WithCancel(ctx)
	defer release()
	// The elector runs OnStartedLeading in its own goroutine and does not wait for it; it cancels
	// that goroutine's context when Run returns, so waiting for fn afterwards is bounded.
	started := make(chan struct{})
	done := make(chan error, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, WatchDog: watchdog,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				close(started)
				logger.Info("leading: watcher starts", "lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
				err := fn(ctx)
				if err != nil {
					logger.Error("watcher stopped while leading: giving the Lease up", "error", err)
					release() // ReleaseOnCancel clears the holder, the other replica acquires at its next try
				}
				done <- err
			},
			OnStoppedLeading: func() { logger.Info("stopped leading", "identity", le.Identity) },
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	if watchdog != nil {
		watchdog.SetLeaderElection(elector) // only RunOrDie does this itself
	}
	elector.Run(electCtx)
	select {
	case <-started:
	default:
		return nil // never led: ctx ended while waiting for the Lease
	}
	runErr := <-done
	if runErr != nil {
		return runErr
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("lost the %s/%s lease", le.Namespace, le.Name)
}

// WatchdogTimeout is how long past its Lease duration a leader may go without renewing before
// /healthz fails and the kubelet restarts it (its renewal is stuck; the other replica may lead).
const WatchdogTimeout = 20 * time.Second

// liveness answers /healthz: the process can work. A leader whose Lease renewal is stuck cannot
// (it watches while another replica may have taken the Lease over), so it fails.
type liveness struct {
	leader *leaderelection.HealthzAdaptor // nil without leader election
}

func (l liveness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if l.leader != nil {
		if err := l.leader.Check(req); err != nil {
			http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	_, _ = w.Write([]byte("ok"))
}

// readiness answers /readyz: a replica is ready when it reaches Temporal (its worker needs it)
// and its watcher (if it runs one: always without leader election, while leading with it) has
// listed every source once and has not stopped. A follower that reaches Temporal is ready.
type readiness struct {
	// starting says what the process still waits for at start (nil: nothing to wait for).
	starting      *startup
	watcher       *watcher.Watcher
	leaderElected bool
	leading       atomic.Bool
	stopped       atomic.Bool
	// temporal answers whether Temporal is reachable (nil: not checked).
	temporal func(context.Context) error
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.stopped.Load() {
		http.Error(w, "watcher stopped", http.StatusServiceUnavailable)
		return
	}
	if r.starting != nil {
		if waiting := r.starting.Waiting(); waiting != "" {
			http.Error(w, "starting: "+waiting, http.StatusServiceUnavailable)
			return
		}
	}
	if r.temporal != nil {
		if err := r.temporal(req.Context()); err != nil {
			http.Error(w, "temporal unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	switch {
	case r.leaderElected && !r.leading.Load():
		_, _ = w.Write([]byte("ok: follower (worker only)"))
	case !r.watcher.Synced():
		http.Error(w, "watcher not synced yet", http.StatusServiceUnavailable)
	default:
		_, _ = w.Write([]byte("ok"))
	}
}
