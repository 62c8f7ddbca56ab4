//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// historyClass's policy fences a GPU at its third application fault within the hour.
const historyClass = "history.gpu.sim.devicewarden.io"

// Three jobs, one after another, crash on XID 13 (the application's own fault) on one GPU; each
// job's Pod is deleted, so the GPU is idle and its workflow run ends. The faults add up through
// the node's history record: the first two leave the GPU in service and their runs end, the third,
// in a run of its own, fences it.
func TestApplicationFaultsAddUpAcrossRuns(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, historyClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "app-history", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	for job := 1; job <= 3; job++ {
		pod := runningPod(t, ctx, kube, sim.Workload{Namespace: "app-history", Name: fmt.Sprintf("job-%d", job), Node: nodes[0],
			Index: ptr.To(0), DeviceClass: historyClass, Template: true})
		if _, err := sim.SetHealth(ctx, kube, id, corev1.ResourceHealthStatusUnhealthy, "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Engine Exception"); err != nil {
			t.Fatal(err)
		}
		if job == 3 {
			st := waitState(t, ctx, shared, id, time.Minute, func(st decide.DeviceState) bool { return st.Quarantine != nil })
			if !strings.Contains(st.Quarantine.Reason, "3 application faults within 1h0m0s") || st.AppFaultsTotal != 3 {
				t.Fatalf("fenced for %q after %d application faults", st.Quarantine.Reason, st.AppFaultsTotal)
			}
			recordHistory(t, ctx, shared.temporal, id.WorkflowID(), "device_app_faults_across_runs_v17.json")
			break
		}
		st := waitState(t, ctx, shared, id, time.Minute, func(st decide.DeviceState) bool { return st.AppFaultsTotal == job })
		if st.State != decide.Healthy || st.Quarantine != nil {
			t.Fatalf("job %d: state %s, quarantine %+v", job, st.State, st.Quarantine)
		}
		if err := kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the idle GPU's run ended", func() error {
			d, err := shared.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), "")
			if err != nil {
				return err
			}
			if s := d.GetWorkflowExecutionInfo().GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				return fmt.Errorf("run %s", s)
			}
			return nil
		})
		if job == 2 {
			recordHistory(t, ctx, shared.temporal, id.WorkflowID(), "device_history_written_v17.json")
		}
		// The node's record holds the faults so far, where an operator can read them.
		cm, err := kube.CoreV1().ConfigMaps(kubeobj.Own("")).Get(ctx, kubeobj.HistoryName(nodes[0]), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var entries map[string]decide.History
		if err := json.Unmarshal([]byte(cm.Data[kubeobj.HistoryKey]), &entries); err != nil {
			t.Fatal(err)
		}
		if got := entries[id.String()]; len(got.AppFaults) != job {
			t.Fatalf("after job %d the record holds %+v", job, entries)
		}
	}
}
