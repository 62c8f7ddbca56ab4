//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// stormPolicy repairs every simulated device with the driver's reset tool, and moves nothing.
const stormPolicy = `
default:
  stabilityWindow: 0s
  probe: {timeout: 30s}
  canary: {timeout: 30s}
  repair:
    steps:
      - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
`

// TestResetStormKeepsToTheBudget: 50 devices get a transient fault at once, and their holders
// leave. With a reset budget of 5 the breaker grants 5 devices their reset in the window, never
// more reset Pods run at once than that, and the rest wait, saying why; quarantines go on.
func TestResetStormKeepsToTheBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pols, err := policy.Parse([]byte(stormPolicy))
	if err != nil {
		t.Fatal(err)
	}
	pols = pols.WithIdentity(sim.Driver, sim.Identity...).WithCDI(sim.Driver, sim.DeclaredCDIStyles...)
	s, stop, err := startStack(ctx, t.TempDir(), app.ControllerOptions{Workers: 8, Policies: pols,
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 1000, MaxResets: 5}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const n, budget = 50, 5
	ids := devicePods(t, ctx, s.kube, "rstorm", n)

	// Every reset Pod the cluster sees, and the most that ever ran at once.
	var mu sync.Mutex
	seen, most := map[string]bool{}, 0
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for watchCtx.Err() == nil {
			pods, err := s.kube.CoreV1().Pods(policy.DefaultResetNamespace).List(watchCtx, metav1.ListOptions{LabelSelector: kubeobj.LabelRole + "=" + string(decide.ActRepair)})
			if err == nil {
				mu.Lock()
				live := 0
				for _, p := range pods.Items {
					seen[p.Namespace+"/"+p.Name+"/"+string(p.UID)] = true
					if p.DeletionTimestamp == nil {
						live++
					}
				}
				most = max(most, live)
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	for _, id := range ids {
		if err := sim.SetFaultKind(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48", sim.FaultTransient); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.SetHealth(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
			t.Fatal(err)
		}
	}
	stateOfEach := func() (map[decide.State]int, int, error) {
		states, waiting := map[decide.State]int{}, 0
		for _, id := range ids {
			var st decide.DeviceState
			if err := queryInto(ctx, s.temporal, id.WorkflowID(), &st); err != nil {
				return nil, 0, err
			}
			states[st.State]++
			if n := len(st.Transitions); n > 0 && strings.Contains(st.Transitions[n-1].Reason, "reset budget spent") {
				waiting++
			}
		}
		return states, waiting, nil
	}
	eventually(t, 90*time.Second, "every device quarantined", func() error {
		states, _, err := stateOfEach()
		if err != nil || states[decide.Quarantined] != n {
			return fmt.Errorf("states %v (%v)", states, err)
		}
		return nil
	})
	// The holders leave (as a migration would move them): every device is idle at once.
	if err := s.kube.CoreV1().Pods("rstorm").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "5 released, 45 waiting for the reset budget", func() error {
		states, waiting, err := stateOfEach()
		if err != nil {
			return err
		}
		if states[decide.Released] != budget || waiting != n-budget {
			return fmt.Errorf("states %v, %d waiting for the budget", states, waiting)
		}
		return nil
	})
	var br breaker.State
	if err := queryInto(ctx, s.temporal, api.BreakerWorkflowID, &br); err != nil {
		t.Fatal(err)
	}
	resets := 0
	for _, g := range br.Grants {
		if g.Action == breaker.Reset {
			resets++
		}
	}
	stopWatch()
	mu.Lock()
	defer mu.Unlock()
	if resets != budget || len(seen) != budget || most > budget || br.Open {
		t.Fatalf("%d reset grants, %d reset Pods (%d at once), breaker open %v: want %d, never more", resets, len(seen), most, br.Open, budget)
	}
	t.Logf("%d devices reset and released, %d waiting for the window; at most %d reset Pods at once", budget, n-budget, most)
}
