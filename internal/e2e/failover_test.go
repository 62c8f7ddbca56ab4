//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// TestLeaderFailover runs replicas as a Deployment would, elected through a real Lease. A replica
// that cannot reach Temporal keeps retrying, not ready, and never takes the Lease; the
// leader watches while a follower stands by (ready, worker only); a device disappears from its
// slice and turns Suspect; the leader leaves and the follower takes over: its watcher re-sends the
// device's state, which stays Suspect with the same tolerance window (a watcher that only knew
// what it saw change would have sent the Pod's Healthy and cleared it).
func TestLeaderFailover(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, stopInfra, err := startInfra(ctx, t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	elect := func(identity string) *app.LeaderElection {
		return &app.LeaderElection{Namespace: "default", Name: "devicewarden-watcher", Identity: identity,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
	}
	holder := func() string {
		l, err := s.kube.CoordinationV1().Leases("default").Get(ctx, "devicewarden-watcher", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	// Temporal unreachable at start: nothing listens on the address. The replica waits for it,
	// not ready, and never contends for the Lease while the others lead.
	dead, err := client.NewLazyClient(client.Options{HostPort: freeAddress(t), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	lnDead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	readyDead := lnDead.Addr().String()
	deadCtx, stopDead := context.WithCancel(ctx)
	deadDone := make(chan error, 1)
	go func() {
		deadDone <- app.RunController(deadCtx, s.kube, dead, app.ControllerOptions{Workers: 1, LeaderElection: elect("unreachable"), MetricsListener: lnDead}, metrics.New(), testLogger)
	}()
	defer func() {
		stopDead()
		if err := <-deadDone; err != nil {
			t.Errorf("replica without Temporal, stopped: %v", err)
		}
	}()
	eventually(t, 20*time.Second, "replica without Temporal not ready, waiting for it", func() error {
		return expectNotReady(readyDead, "starting: reach temporal")
	})

	_, stopA := s.controller(app.ControllerOptions{Workers: 4, LeaderElection: elect("a")})
	defer stopA()
	eventually(t, 20*time.Second, "replica a leads", func() error {
		if h := holder(); h != "a" {
			return fmt.Errorf("holder %q", h)
		}
		return nil
	})
	lnB, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	readyB := lnB.Addr().String()
	_, stopB := s.controller(app.ControllerOptions{Workers: 4, LeaderElection: elect("b"), MetricsListener: lnB})
	defer stopB()
	eventually(t, 20*time.Second, "replica b ready as a follower", func() error {
		return expectReady(readyB, "follower")
	})

	id := devicePods(t, ctx, s.kube, "failover-le", 1)[0]
	unpublish(t, ctx, s.kube, id)
	settled(t, ctx, s, id, decide.Suspect)
	before, err := stateOf(ctx, s, id)
	if err != nil {
		t.Fatal(err)
	}
	stopA()
	eventually(t, 20*time.Second, "replica b leads and is ready", func() error {
		if h := holder(); h != "b" {
			return fmt.Errorf("holder %q", h)
		}
		return expectReady(readyB, "ok")
	})
	stillSuspect(t, ctx, s, id, before, "the failover")
}

// Leader-election timings of the e2e replicas: the production defaults (a renewal may take seconds
// on a loaded 2-core machine beside two control planes without costing the lease), with a short
// retry so that a replica takes over a released Lease within a second.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// freeAddress is a loopback address nothing listens on at the moment.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// expectReady checks that /readyz answers 200 with a body that contains want.
func expectReady(addr, want string) error {
	return expectReadyz(addr, http.StatusOK, want)
}

// expectNotReady checks that /readyz at addr answers 503 with a body containing want.
func expectNotReady(addr, want string) error {
	return expectReadyz(addr, http.StatusServiceUnavailable, want)
}

func expectReadyz(addr string, code int, want string) error {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code || !strings.Contains(string(body), want) {
		return fmt.Errorf("readyz %d %q", resp.StatusCode, body)
	}
	return nil
}
