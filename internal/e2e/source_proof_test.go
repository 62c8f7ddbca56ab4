//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// Proof from the source, on the real stack. kubelet reports XID 48 (reset first); while the
// GPU is quarantined its driver states a recovery action of node reboot, which the simulated
// dcgm-exporter shows and the real Prometheus scrapes. The reset clears the XID's fault and
// the probe and canary pass, but the recovery action stands: the review waits for it, fails,
// and the ladder takes the node step. The reboot clears the action; the device is released
// only once the series has left Prometheus' answer.
func TestTheSourcesMustSayHealthyBeforeRelease(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, proofClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "proof", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	pod := runningPod(t, ctx, kube, sim.Workload{Namespace: "proof", Name: "holder", Node: nodes[0], Index: ptr.To(0), DeviceClass: proofClass})
	id := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	if err := sim.SetFaultKind(ctx, kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48: double bit ECC error", sim.FaultTransient); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48: double bit ECC error"); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, shared, id, time.Minute, func(st decide.DeviceState) bool { return st.Quarantine != nil })
	if c := st.Quarantine.Choice; c == nil || c.First != policy.FirstReset {
		t.Fatalf("choice %+v, want reset first", c)
	}
	// The driver's verdict, after the fault: the node must reboot. Sent once as a fault, then
	// standing while the series does.
	if err := sim.SetRecoveryAction(ctx, kube, id, sim.RecoveryNodeReboot); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, shared, id, time.Minute, func(st decide.DeviceState) bool {
		return slices.Contains(st.Standing, "dcgm: recovery-action:2")
	})
	// The ladder waits for the Pod that holds the device.
	if err := kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, ctx, shared, id, 3*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	tries := q.Ladder.Tries
	if len(tries) != 2 || tries[0].Kind != policy.RepairReset || !tries[0].Result.Passed || !strings.Contains(tries[0].Review, "its sources still report the fault") ||
		tries[1].Kind != policy.RepairNode || tries[1].Review != "passed: released" {
		t.Fatalf("tries %+v", tries)
	}
	var waited, cleared time.Time
	for _, tr := range st.Transitions {
		switch {
		case strings.Contains(tr.Reason, "waiting up to 20s for its sources to say Healthy") && waited.IsZero():
			waited = tr.At // the first review's
		case strings.Contains(tr.Reason, "its sources say Healthy again"):
			cleared = tr.At
		}
	}
	if waited.IsZero() || len(st.Standing) != 0 {
		t.Fatalf("the trail does not show the wait (standing %v): %+v", st.Standing, st.Transitions)
	}
	// After the reboot the series may be gone before the review's checks end: then it does not wait.
	after := "the series was gone before the checks ended"
	if !cleared.IsZero() {
		after = "released " + q.ClosedAt.Sub(cleared).Round(time.Millisecond).String() + " after the sources said Healthy"
	}
	t.Logf("reset passed but the recovery action stood: the first review waited from %s, then the next try, %s; released %s after the quarantine; %s",
		waited.Sub(q.CreatedAt).Round(time.Millisecond), tries[1].Kind, q.ClosedAt.Sub(q.CreatedAt).Round(time.Millisecond), after)
	recordHistory(t, ctx, shared.temporal, id.WorkflowID(), "device_source_proof_v14.json")
}
