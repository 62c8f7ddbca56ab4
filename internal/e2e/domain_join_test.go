//go:build e2e

package e2e

import (
	"context"
	"fmt"
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

// Two faults in one reset domain are one reset: GPUs 0 and 3 of an 8-GPU baseboard both fail
// while a tenant on GPU 5 holds the baseboard, so both resets wait; once the tenant leaves, one
// device's reset runs and the other's joins it (it runs no reset of its own), and both devices'
// reviews follow it and release them.
func TestTwoFaultsInOneDomainAreOneReset(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, domainClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateBaseboardNodes(ctx, kube, "dom-join", 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	node, ns := nodes[0], "dom-join"
	runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "tenant", Node: node, Index: ptr.To(5), Template: true, DeviceClass: domainClass})
	// Both GPUs run a Pod of their own when their faults come, and both are quarantined before
	// either Pod goes: the domain is held throughout, by the tenant at least.
	var bad []device.ID
	for _, i := range []int{0, 3} {
		id := device.ID{Driver: sim.Driver, Pool: node, Device: fmt.Sprintf("gpu-%d", i)}
		runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "failing-" + id.Device, Node: node, Index: ptr.To(i), Template: true, DeviceClass: domainClass})
		bad = append(bad, id)
	}
	for _, id := range bad {
		if err := sim.SetFaultKind(ctx, kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48", sim.FaultTransient); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.SetHealth(ctx, kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range bad {
		waitState(t, ctx, shared, id, 30*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	}
	for _, id := range bad {
		if err := kube.CoreV1().Pods(ns).Delete(ctx, "failing-"+id.Device, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range bad {
		st := waitState(t, ctx, shared, id, 2*time.Minute, func(st decide.DeviceState) bool {
			n := len(st.Transitions)
			return n > 0 && strings.Contains(st.Transitions[n-1].Reason, "repair waits: claim "+ns+"/")
		})
		if l := st.Quarantine.Ladder; l == nil || len(l.Tries) != 0 {
			t.Fatalf("%s: a try was taken while its domain was held: %+v", id, l)
		}
	}
	tenantRuns(t, ctx, ns, "while both resets wait")
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "tenant", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	joined, ran := 0, 0
	for _, id := range bad {
		st := waitState(t, ctx, shared, id, 3*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
		q := st.Closed[len(st.Closed)-1]
		if len(q.Ladder.Tries) != 1 || !q.Ladder.Tries[0].Result.Passed || q.Ladder.Tries[0].Review != "passed: released" {
			t.Fatalf("%s: tries %+v", id, q.Ladder.Tries)
		}
		if r := q.Ladder.Tries[0].Result; r.Joined != "" {
			joined++
			recordHistory(t, ctx, shared.temporal, id.WorkflowID(), "device_reset_joined.json")
			t.Logf("%s joined %s's reset: %s (time to repair %s)", id, r.Joined, r.Reason, q.ClosedAt.Sub(q.CreatedAt).Round(time.Second))
		} else {
			ran++
			t.Logf("%s reset the domain: %s (time to repair %s)", id, r.Reason, q.ClosedAt.Sub(q.CreatedAt).Round(time.Second))
		}
	}
	if joined != 1 || ran != 1 {
		t.Fatalf("%d resets ran and %d joined, want one of each", ran, joined)
	}
}
