//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/temporalserver"
)

// TestTemporalDown: the Temporal server stops while devices turn Unhealthy; the watcher keeps their
// latest state, retries, and once the server is back on the same file every device is quarantined.
func TestTemporalDown(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, stopInfra, err := startInfra(ctx, dir, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	// The restarted server listens where the first one did, so the clients find it again.
	addr := s.frontend
	kube := s.kube
	// A cap of 10% of these 8 devices would hold all but one; this test is about Temporal.
	m, stopCtl := s.controller(app.ControllerOptions{Workers: 4, Breaker: breaker.Config{Window: time.Minute, MaxCount: 100}})
	defer stopCtl()
	ids := devicePods(t, ctx, kube, "tdown", 3)
	ruleFor := func(i int) error {
		_, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, ids[i].TaintRuleName(), metav1.GetOptions{})
		return err
	}

	setHealth(t, ctx, kube, ids[:1], corev1.ResourceHealthStatusUnhealthy)
	eventually(t, 30*time.Second, "first device quarantined", func() error { return ruleFor(0) })

	if err := s.server.Stop(); err != nil {
		t.Fatal(err)
	}
	setHealth(t, ctx, kube, ids[1:], corev1.ResourceHealthStatusUnhealthy)
	eventually(t, 30*time.Second, "signals fail while Temporal is down", func() error {
		if n := testutil.ToFloat64(m.Signals.WithLabelValues("error")); n < 1 {
			return fmt.Errorf("%v signal errors", n)
		}
		return nil
	})
	srv, err := temporalserver.Start(temporalserver.Config{DBPath: filepath.Join(dir, "temporal", "temporal.db"), FrontendAddress: addr, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	eventually(t, 90*time.Second, "devices flipped while Temporal was down are quarantined", func() error {
		for i := 1; i < len(ids); i++ {
			if err := ruleFor(i); err != nil {
				st, qerr := stateOf(ctx, s, ids[i])
				return fmt.Errorf("%v; signals ok=%v err=%v; state %s held %q (query: %v)", err,
					testutil.ToFloat64(m.Signals.WithLabelValues("ok")), testutil.ToFloat64(m.Signals.WithLabelValues("error")),
					st.State, st.HeldReason, qerr)
			}
		}
		return nil
	})
	// Exactly once across the outage: one workflow run and one transition per device, each rule
	// created once (the apiserver's audit log), none deleted.
	var rules []string
	for _, id := range ids {
		st, err := stateOf(ctx, s, id)
		if err != nil || st.State != decide.Quarantined || len(st.Transitions) != 1 {
			t.Fatalf("%s: %s with %d transitions (%v)", id, st.State, len(st.Transitions), err)
		}
		if n, err := runs(ctx, s, id); err != nil || n != 1 {
			t.Fatalf("%s: %d runs (%v)", id, n, err)
		}
		rules = append(rules, id.TaintRuleName())
	}
	expectCreatedOnce(t, s, rules)
}
