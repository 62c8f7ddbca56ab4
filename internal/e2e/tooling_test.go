//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// pullClass devices are reviewed 3 s after their quarantine; a check that does not run alerts at
// once and is taken again 5 s later.
const pullClass = "pull.gpu.sim.devicewarden.io"

// A probe whose image the node cannot pull is the tooling's failure, not the GPU's: the device
// stays quarantined, its review is not failed (no failed probe, no longer lease), a person is
// alerted, and once the registry is reachable again the next probe runs and releases it.
func TestAProbeThatCannotBePulledCountsNothing(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, pullClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "pull", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	if err := sim.SetUnpullable(ctx, kube, node, policy.DefaultCheckImage); err != nil {
		t.Fatal(err)
	}
	bad := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-1"}
	runningPod(t, ctx, kube, sim.Workload{Namespace: "pull", Name: "trainer", Node: node, Index: ptr.To(1), Template: true, DeviceClass: pullClass})
	// The Pod says the GPU failed (it did not: the probe that runs will pass).
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, shared, bad, 30*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	if err := kube.CoreV1().Pods("pull").Delete(ctx, "trainer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, shared, bad, time.Minute, func(st decide.DeviceState) bool { return st.NotRun != nil && st.NotRun.Count >= 2 })
	if st.State != decide.Recovering || st.NotRun.Kind != decide.ActProbe || !strings.Contains(st.NotRun.Reason, "ImagePullBackOff") ||
		st.LastProbe != nil || st.Quarantine.Reviews != 1 || st.ReviewInterval != 0 {
		t.Fatalf("after two probes not run: state %s, not run %+v, last probe %+v, reviews %d, review interval %s",
			st.State, st.NotRun, st.LastProbe, st.Quarantine.Reviews, st.ReviewInterval)
	}
	if texts := activityInputs(t, ctx, shared.temporal, bad.WorkflowID(), "Alert"); !anyContains(texts, "probe of "+bad.String()+" did not run, 1 in a row") {
		t.Fatalf("no person was told the probe did not run: %v", texts)
	}
	show, err := shared.cli(ctx, "device", "show", bad.String())
	if err != nil || !strings.Contains(show, "Not run:") || !strings.Contains(show, "the tooling failed, not the device") {
		t.Fatalf("device show: %v\n%s", err, show)
	}
	// The registry is reachable again: the next probe runs, and so does the rest of the review.
	if err := sim.SetUnpullable(ctx, kube, node); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, ctx, shared, bad, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	if p := st.LastProbe; p == nil || !p.Passed || st.NotRun != nil {
		t.Fatalf("released with last probe %+v, not run %+v", p, st.NotRun)
	}
	recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_probe_not_run_v18.json")
}

// activityInputs are the inputs, as JSON, of every task of an activity a workflow's runs scheduled.
func activityInputs(t *testing.T, ctx context.Context, tc client.Client, workflowID, activity string) []string {
	t.Helper()
	var out []string
	for _, run := range runIDs(t, ctx, tc, workflowID) {
		it := tc.GetWorkflowHistory(ctx, workflowID, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if a := ev.GetActivityTaskScheduledEventAttributes(); a.GetActivityType().GetName() == activity {
				for _, p := range a.GetInput().GetPayloads() {
					out = append(out, string(p.GetData()))
				}
			}
		}
	}
	return out
}

func anyContains(texts []string, part string) bool {
	for _, s := range texts {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}
