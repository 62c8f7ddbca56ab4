//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// domainClass devices climb a ladder of one reset with the simulated driver's tool; the reset's
// domain is the driver's (attribute:baseboard in the test policy): a baseboard node's 8 GPUs are one.
const domainClass = "domain.gpu.sim.devicewarden.io"

// resetBesideTenant runs a tenant on GPU 3 of a new node, gives GPU 0 a fault a reset clears, and
// lets GPU 0's own Pod go: the ladder's reset is due while the tenant runs.
func resetBesideTenant(t *testing.T, ctx context.Context, prefix string, create func(context.Context, string) ([]string, error)) (device.ID, string) {
	t.Helper()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, domainClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := create(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	runningPod(t, ctx, kube, sim.Workload{Namespace: prefix, Name: "tenant", Node: node, Index: ptr.To(3), Template: true, DeviceClass: domainClass})
	return faultGPU0(t, ctx, prefix, node, sim.FaultTransient), prefix
}

// faultGPU0 runs a Pod on GPU 0 of node, gives the GPU an XID 48 fault of kind (a reset-first
// cause), waits for its quarantine and lets its Pod go: the ladder's reset is due.
func faultGPU0(t *testing.T, ctx context.Context, ns, node, kind string) device.ID {
	t.Helper()
	kube := shared.kube
	runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "failing", Node: node, Index: ptr.To(0), Template: true, DeviceClass: domainClass})
	bad := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-0"}
	if err := sim.SetFaultKind(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48", kind); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, shared, bad, 30*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "failing", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return bad
}

// tenantRuns fails the test unless the tenant's Pod still runs.
func tenantRuns(t *testing.T, ctx context.Context, ns, when string) {
	t.Helper()
	p, err := shared.kube.CoreV1().Pods(ns).Get(ctx, "tenant", metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodRunning {
		msg := ""
		if err == nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Terminated != nil {
			msg = p.Status.ContainerStatuses[0].State.Terminated.Message
		}
		t.Fatalf("%s: the tenant on GPU 3 is not running (%v; %s %s)", when, err, p.Status.Phase, msg)
	}
}

// On an 8-GPU baseboard, one reset domain, a reset of GPU 0 waits while a tenant runs on GPU 3
// (holders: wait): no try is taken, the tenant runs on. Once the tenant leaves, the reset runs,
// and the device's review releases it.
func TestAResetWaitsForItsBaseboard(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bad, ns := resetBesideTenant(t, ctx, "dom-wait", func(ctx context.Context, prefix string) ([]string, error) {
		return sim.CreateBaseboardNodes(ctx, shared.kube, prefix, 1, 8)
	})
	st := waitState(t, ctx, shared, bad, time.Minute, func(st decide.DeviceState) bool {
		n := len(st.Transitions)
		return n > 0 && strings.Contains(st.Transitions[n-1].Reason, "repair waits: claim "+ns+"/tenant")
	})
	if l := st.Quarantine.Ladder; l == nil || len(l.Tries) != 0 {
		t.Fatalf("a try was taken beside the tenant: %+v", l)
	}
	time.Sleep(5 * time.Second) // the reset is not taken meanwhile
	tenantRuns(t, ctx, ns, "while the reset waits")
	if err := shared.kube.CoreV1().Pods(ns).Delete(ctx, "tenant", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	if len(q.Ladder.Tries) != 1 || !q.Ladder.Tries[0].Result.Passed {
		t.Fatalf("tries %+v", q.Ladder.Tries)
	}
	t.Logf("time to repair, waiting for the baseboard's tenant: %s", q.ClosedAt.Sub(q.CreatedAt))
}

// On a node whose GPUs are each a reset domain of their own, the reset runs at once beside the
// tenant on GPU 3, and the tenant runs on.
func TestAResetOfALoneGPURunsBesideItsTenant(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bad, ns := resetBesideTenant(t, ctx, "dom-alone", func(ctx context.Context, prefix string) ([]string, error) {
		return sim.CreateNodes(ctx, shared.kube, prefix, 1, 8)
	})
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	tenantRuns(t, ctx, ns, "after the reset")
	q := st.Closed[len(st.Closed)-1]
	t.Logf("time to repair, a GPU alone: %s", q.ClosedAt.Sub(q.CreatedAt))
}
