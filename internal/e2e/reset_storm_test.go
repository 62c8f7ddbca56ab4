//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/devicewarden/devicewarden/internal/device"
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

// TestResetStormKeepsToTheBudget: devices get a transient fault at once and their holders
// leave. With a reset budget of 3 at a time, never more than 3 reset Pods run at once, every device
// is reset and back within minutes (a budget per window kept the rest out for the window), and the
// breaker never opens. Then the reset tool fails on 4 more devices: after 2 failures resets stop,
// with an alert naming them (the resets already running end, and fail), and the fourth device
// waits, saying why; quarantines go on.
func TestResetStormKeepsToTheBudget(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pols, err := policy.Parse([]byte(stormPolicy))
	if err != nil {
		t.Fatal(err)
	}
	pols = pols.WithIdentity(sim.Driver, sim.Identity...).WithCDI(sim.Driver, sim.DeclaredCDIStyles...)
	s, stop, err := startStack(ctx, t.TempDir(), app.ControllerOptions{Workers: 8, Policies: pols,
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 1000, MaxResets: 3, MaxResetFailures: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const n, budget, broken = 7, 3, 4
	ids := devicePods(t, ctx, s.kube, "rstorm", n+broken)

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
					if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
						live++
					}
				}
				most = max(most, live)
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	fault := func(ids []device.ID, kind string) {
		for _, id := range ids {
			if err := sim.SetFaultKind(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48", kind); err != nil {
				t.Fatal(err)
			}
			if _, err := sim.SetHealth(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
				t.Fatal(err)
			}
		}
	}
	stateOfEach := func(ids []device.ID, waitingFor string) (map[decide.State]int, int, error) {
		states, waiting := map[decide.State]int{}, 0
		for _, id := range ids {
			var st decide.DeviceState
			if err := queryInto(ctx, s.temporal, id.WorkflowID(), &st); err != nil {
				return nil, 0, err
			}
			states[st.State]++
			if n := len(st.Transitions); n > 0 && strings.Contains(st.Transitions[n-1].Reason, waitingFor) {
				waiting++
			}
		}
		return states, waiting, nil
	}
	fault(ids[:n], sim.FaultTransient)
	eventually(t, 90*time.Second, "every device quarantined", func() error {
		states, _, err := stateOfEach(ids[:n], "")
		if err != nil || states[decide.Quarantined] != n {
			return fmt.Errorf("states %v (%v)", states, err)
		}
		return nil
	})
	// The holders leave (as a migration would move them): every device is idle at once.
	leave := func(from, to int) {
		for i := from; i < to; i++ {
			if err := s.kube.CoreV1().Pods("rstorm").Delete(ctx, fmt.Sprintf("job-%d", i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	leave(0, n)
	eventually(t, 3*time.Minute, "every device reset and released", func() error {
		states, _, err := stateOfEach(ids[:n], "")
		if err != nil || states[decide.Released] != n {
			return fmt.Errorf("states %v (%v)", states, err)
		}
		return nil
	})
	took := time.Since(start)
	mu.Lock()
	if len(seen) != n || most > budget {
		t.Fatalf("%d reset Pods (%d at once): want %d, never more than %d at once", len(seen), most, n, budget)
	}
	mu.Unlock()
	t.Logf("%d devices reset and released in %s, at most %d reset Pods at once", n, took.Round(time.Second), most)
	for _, id := range ids[:n] { // a device the budget refused, woken when a reset ended
		if st, err := stateOf(ctx, s, id); err == nil && slices.ContainsFunc(st.Transitions, func(tr decide.Transition) bool {
			return strings.Contains(tr.Reason, "reset budget spent")
		}) {
			for _, tr := range st.Transitions {
				t.Logf("%s %s: %s", id.Device, tr.At.Format("15:04:05.000"), tr.Reason)
			}
			recordHistory(t, ctx, s.temporal, id.WorkflowID(), "device_reset_wake_v15.json")
			break
		}
	}

	// A reset tool that fails: two failures stop resets.
	fault(ids[n:], sim.FaultPermanent)
	eventually(t, 90*time.Second, "the broken devices quarantined", func() error {
		states, _, err := stateOfEach(ids[n:], "")
		if err != nil || states[decide.Quarantined] != broken {
			return fmt.Errorf("states %v (%v)", states, err)
		}
		return nil
	})
	leave(n, n+broken)
	var br breaker.State
	eventually(t, 2*time.Minute, "resets held after two failures, a device waiting", func() error {
		if err := queryInto(ctx, s.temporal, api.BreakerWorkflowID, &br); err != nil {
			return err
		}
		_, waiting, err := stateOfEach(ids[n:], "resets held")
		// The resets running when the second failed end too: they fail, and count.
		if err != nil || !br.ResetsHeld || len(br.ResetFailures) < 2 || waiting < 1 {
			return fmt.Errorf("held %v, failures %v, %d waiting (%v)", br.ResetsHeld, br.ResetFailures, waiting, err)
		}
		return nil
	})
	mu.Lock()
	resets := len(seen)
	mu.Unlock()
	if br.Open || !strings.Contains(br.ResetsHeldReason, "resets of 2 devices failed within 10m0s") || resets > n+budget {
		t.Fatalf("breaker open %v, held for %q, %d reset Pods", br.Open, br.ResetsHeldReason, resets)
	}
	t.Logf("resets held: %s", br.ResetsHeldReason)
	recordHistory(t, ctx, s.temporal, api.BreakerWorkflowID, "breaker_device_brake.json")
}
