//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/cli"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// cli runs a devicewarden command against the stack's Temporal and returns what it printed.
func (s *stack) cli(ctx context.Context, args ...string) (string, error) {
	return runCLI(ctx, append(args, "--temporal-address", s.frontend)...)
}

// kubeCLI runs a devicewarden command against the stack's cluster and returns what it printed.
func (s *stack) kubeCLI(ctx context.Context, args ...string) (string, error) {
	return runCLI(ctx, append(args, "--kubeconfig", s.kubeconfig)...)
}

// runCLI runs a devicewarden command in this process and returns what it printed.
func runCLI(ctx context.Context, args ...string) (string, error) {
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(append(args, "--log-level", "warn"))
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// TestBreakerCapsAStorm: 20 devices turn Unhealthy at once with a cap of 5. Exactly 5 are
// quarantined, the breaker opens, and the reason is visible through the query and `device list`.
func TestBreakerCapsAStorm(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, stop, err := startStack(ctx, t.TempDir(), app.ControllerOptions{Workers: 8,
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 5}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const n = 20
	ids := devicePods(t, ctx, s.kube, "storm", n)

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := sim.SetHealth(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Every device workflow has decided: 5 quarantined, 15 holding their action.
	var heldID string
	eventually(t, 60*time.Second, "all 20 devices decided", func() error {
		quarantined, held := 0, 0
		for _, id := range ids {
			v, err := s.temporal.QueryWorkflow(ctx, id.WorkflowID(), "", api.QueryState)
			if err != nil {
				return err
			}
			var st decide.DeviceState
			if err := v.Get(&st); err != nil {
				return err
			}
			switch {
			case st.State == decide.Quarantined:
				quarantined++
			case st.Held != nil && strings.Contains(st.HeldReason, "circuit breaker open"):
				held++
				heldID = id.WorkflowID()
			}
		}
		if quarantined+held != n {
			return fmt.Errorf("%d quarantined, %d held", quarantined, held)
		}
		if quarantined != 5 {
			t.Fatalf("%d devices quarantined with a cap of 5", quarantined)
		}
		return nil
	})
	rules, err := s.kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.LabelManagedBy + "=" + kubeobj.ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	if len(rules.Items) != 5 {
		t.Fatalf("%d DeviceTaintRules, want exactly 5", len(rules.Items))
	}

	// The worker reports the permits its devices took from its lease within a second or so: then
	// the breaker names each of the 5 and holds no permit outstanding.
	var br breaker.State
	eventually(t, 10*time.Second, "the breaker names every grant", func() error {
		v, err := s.temporal.QueryWorkflow(ctx, api.BreakerWorkflowID, "", api.QueryState)
		if err != nil {
			return err
		}
		br = breaker.State{}
		if err := v.Get(&br); err != nil {
			return err
		}
		if len(br.Grants) != 5 || len(br.Leases) != 0 {
			return fmt.Errorf("%d grants, leases %+v", len(br.Grants), br.Leases)
		}
		return nil
	})
	if !br.Open || !strings.Contains(br.Reason, "cap of 5") {
		t.Fatalf("breaker %+v", br)
	}
	recordHistory(t, ctx, s.temporal, api.BreakerWorkflowID, "breaker_storm.json")
	recordHistory(t, ctx, s.temporal, ids[0].WorkflowID(), "device_storm.json")
	recordHistory(t, ctx, s.temporal, heldID, "device_storm_held.json")
	if trips := testutil.ToFloat64(s.metrics.BreakerTrips); trips != 1 {
		t.Fatalf("breaker trips metric = %v", trips)
	}

	// The same picture through the CLI, read from Temporal visibility.
	eventually(t, 10*time.Second, "device list shows 5 quarantined", func() error {
		out, err := s.cli(ctx, "device", "list", "--state", "Quarantined")
		if err != nil {
			return err
		}
		if got := strings.Count(out, "Quarantined"); got != 5 {
			return fmt.Errorf("%d quarantined rows:\n%s", got, out)
		}
		return nil
	})
}
