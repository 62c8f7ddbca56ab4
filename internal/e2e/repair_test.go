//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// faultOnJob starts a checkpointing Job on a node of two repairClass GPUs and gives its device a
// fault of the kind, reported Unhealthy by the Job's Pod.
func faultOnJob(t *testing.T, ctx context.Context, name, kind string) (device.ID, sim.Workload) {
	t.Helper()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, repairClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, name, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	w := sim.Workload{Namespace: name, Name: "train", Node: nodes[0], DeviceClass: repairClass}
	_, ids := runningJob(t, ctx, w, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: time.Second})
	bad := ids[0]
	if err := sim.SetFaultKind(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48", kind); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
		t.Fatal(err)
	}
	return bad, w
}

// A transient fault: the Job is moved, the idle device is reset by the driver's tool, probed,
// canaried and released, with no person involved.
func TestTransientFaultIsResetAndReleased(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bad, w := faultOnJob(t, ctx, "rep-transient", sim.FaultTransient)
	mid := migrationOf(t, ctx, bad)
	if st := migrationResult(t, ctx, mid); st.Outcome != migrationplan.OutcomeMigrated {
		t.Fatalf("migration %+v", st)
	}
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	if q.Ladder == nil || len(q.Ladder.Tries) != 1 || q.Ladder.Tries[0].Review != "passed: released" || !q.Ladder.Tries[0].Result.Passed {
		t.Fatalf("ladder %+v", q.Ladder)
	}
	if _, err := shared.kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("rule after release: %v", err)
	}
	if f, stands, err := sim.FaultOf(ctx, shared.kube, bad); stands || err != nil {
		t.Fatalf("the reset left the fault: %+v (%v)", f, err)
	}
	for _, tr := range st.Transitions {
		if strings.Contains(tr.Actor, "@") || (tr.Actor != decide.Actor && tr.Actor != "") {
			t.Fatalf("a person acted: %+v", tr)
		}
	}
	t.Logf("time to repair (quarantined to released): %s; job %s/%s moved by %s", q.ClosedAt.Sub(q.CreatedAt), w.Namespace, w.Name, mid)
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_repair_transient.json")
}

// A permanent fault: both resets fail, and the device is Retired with its evidence bundle and
// Event; its rule stays.
func TestPermanentFaultRetiresTheDevice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bad, _ := faultOnJob(t, ctx, "rep-permanent", sim.FaultPermanent)
	st := waitState(t, ctx, shared, bad, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Retired })
	if l := st.Quarantine.Ladder; l == nil || len(l.Tries) != 2 || l.Tries[1].Result == nil || l.Tries[1].Result.Passed {
		t.Fatalf("ladder %+v", l)
	}
	if st.Review != nil || !st.NextDeadline().IsZero() {
		t.Fatalf("a retired device waits for a review: %+v", st.Review)
	}
	name := kubeobj.RetiredName(bad)
	var cm *corev1.ConfigMap
	eventually(t, 30*time.Second, "evidence "+name, func() error {
		var err error
		cm, err = shared.kube.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if !strings.Contains(cm.Data["try-02"], "reset attempt 2: passed=false") || cm.Data["device"] != bad.String() {
		t.Fatalf("evidence %v", cm.Data)
	}
	eventually(t, 30*time.Second, "DeviceRetired event", func() error {
		evs, err := shared.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=DeviceRetired"})
		if err != nil {
			return err
		}
		if len(evs.Items) == 0 {
			return fmt.Errorf("no event yet")
		}
		return nil
	})
	if _, err := shared.kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("a retired device's rule: %v", err)
	}
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_repair_retired.json")
}
