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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// nodePolicy resets every simulated device, then asks the simulator's remediator for a reboot
// of its node without waiting for a person.
const nodePolicy = `
default:
  stabilityWindow: 0s
  probe: {timeout: 30s}
  canary: {timeout: 30s}
  repair:
    steps:
      - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
      - kind: node
        timeout: 1m
        template: {apiVersion: ` + sim.RebootGroup + `/` + sim.RebootVersion + `, kind: ` + sim.RebootKind + `, spec: {nodeName: "{{ .Node }}"}}
`

// TestNodeStepsRebootOneNodeOfAPoolAtATime: two nodes of one node pool, two devices on each, all
// four with a fault only a reboot clears. The node permit lets one node of the pool reboot at a
// time: the other node waits, saying why, and goes once the first gave its permit back. Each node
// reboots once, for both of its devices, and all four are released.
func TestNodeStepsRebootOneNodeOfAPoolAtATime(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pols, err := policy.Parse([]byte(nodePolicy))
	if err != nil {
		t.Fatal(err)
	}
	pols = pols.WithIdentity(sim.Driver, sim.Identity...).WithCDI(sim.Driver, sim.DeclaredCDIStyles...)
	s, stop, err := startStack(ctx, t.TempDir(), app.ControllerOptions{Workers: 8, Policies: pols,
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 1000, MaxResets: 1000, MaxResetFailures: 1000, MaxReboots: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	all := devicePods(t, ctx, s.kube, "npool", 16)
	nodes := []string{all[0].Pool, all[8].Pool}
	pool := "train-" + nodes[0]
	patch := fmt.Sprintf(`{"metadata":{"labels":{"devicewarden.io/node-pool":%q}}}`, pool)
	for _, n := range nodes {
		if _, err := s.kube.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bad := []device.ID{all[0], all[1], all[8], all[9]}

	// Every boot ID each node shows, and the most nodes with a NodeReboot standing at once.
	var mu sync.Mutex
	boots, most := map[string]map[string]bool{}, 0
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	objs, err := kubeobj.Dynamic(s.kube)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for watchCtx.Err() == nil {
			mu.Lock()
			for _, n := range nodes {
				if node, err := s.kube.CoreV1().Nodes().Get(watchCtx, n, metav1.GetOptions{}); err == nil {
					if boots[n] == nil {
						boots[n] = map[string]bool{}
					}
					boots[n][node.Status.NodeInfo.BootID] = true
				}
			}
			if list, err := objs.Resource(sim.RebootGVR).List(watchCtx, metav1.ListOptions{}); err == nil {
				at := map[string]bool{}
				for _, o := range list.Items {
					name, _, _ := unstructured.NestedString(o.Object, "spec", "nodeName")
					at[name] = true
				}
				most = max(most, len(at))
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	for _, id := range bad {
		if err := sim.SetFaultKind(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "GPU has fallen off the bus (no XID given)", sim.FaultReboot); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.SetHealth(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "GPU has fallen off the bus (no XID given)"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range bad {
		waitState(t, ctx, s, id, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	}
	// The holders leave: a reboot would end them otherwise.
	if err := s.kube.CoreV1().Pods("npool").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	waited := false
	eventually(t, 4*time.Minute, "all four released", func() error {
		released := 0
		for _, id := range bad {
			st, err := stateOf(ctx, s, id)
			if err != nil {
				return err
			}
			for _, tr := range st.Transitions {
				if strings.Contains(tr.Reason, "reboot budget spent: 1 of node pool "+pool+" being rebooted") {
					waited = true
				}
			}
			if st.State == decide.Released {
				released++
			}
		}
		if released != len(bad) {
			return fmt.Errorf("%d of %d released", released, len(bad))
		}
		return nil
	})
	stopWatch()
	mu.Lock()
	defer mu.Unlock()
	for _, n := range nodes {
		if len(boots[n]) != 2 {
			t.Fatalf("node %s showed boot IDs %v: want one reboot", n, boots[n])
		}
	}
	if most != 1 || !waited {
		t.Fatalf("%d nodes of the pool rebooting at once (want 1); a device waited for the pool: %v", most, waited)
	}
	var br breaker.State
	if err := queryInto(ctx, s.temporal, api.BreakerWorkflowID, &br); err != nil {
		t.Fatal(err)
	}
	for _, g := range br.Grants {
		if g.Action == breaker.Reboot {
			t.Fatalf("a node permit was not given back: %+v", g)
		}
	}
	for _, id := range bad {
		st, err := stateOf(ctx, s, id)
		if err != nil {
			t.Fatal(err)
		}
		q := st.Closed[len(st.Closed)-1]
		last := q.Ladder.Tries[len(q.Ladder.Tries)-1]
		t.Logf("%s: time to repair %s; node step: %s", id, q.ClosedAt.Sub(q.CreatedAt).Round(time.Second), last.Result.Reason)
	}
	recordHistory(t, ctx, s.temporal, api.BreakerWorkflowID, "breaker_node_permits.json")
	recordHistory(t, ctx, s.temporal, bad[1].WorkflowID(), "device_repair_node_shared.json")
}
