//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"go.temporal.io/api/serviceerror"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// nvsentinelReport renders the report NVSentinel's fault remediation creates for an XID 79 event
// on the GPU with uuid, with the template deploy/examples gives it.
func nvsentinelReport(t *testing.T, node, uuid string) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/examples/nvsentinel-fault-remediation.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		FaultRemediation struct {
			Maintenance struct {
				Actions map[string]struct {
					APIGroup         string `json:"apiGroup"`
					Version          string `json:"version"`
					TemplateFileName string `json:"templateFileName"`
				} `json:"actions"`
				Templates map[string]string `json:"templates"`
			} `json:"maintenance"`
		} `json:"fault-remediation"`
	}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	m := v.FaultRemediation.Maintenance
	action := m.Actions["COMPONENT_RESET"]
	tmpl, err := template.New("report").Option("missingkey=error").Parse(m.Templates[action.TemplateFileName])
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		NodeName, Message, RecommendedAction string
		ErrorCode                            []string
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, map[string]any{"ApiGroup": action.APIGroup, "Version": action.Version, "ImpactedEntityScopeValue": uuid,
		"HealthEvent": event{NodeName: node, Message: "XID 79: GPU has fallen off the bus", RecommendedAction: "COMPONENT_RESET", ErrorCode: []string{"79"}}}); err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(b.Bytes(), &obj); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return &unstructured.Unstructured{Object: obj}
}

// jobOnGPU runs a checkpointing Job of repairClass on a GPU of the node, and says which.
func jobOnGPU(t *testing.T, ctx context.Context, ns, name, node string) device.ID {
	t.Helper()
	w := sim.Workload{Namespace: ns, Name: name, Node: node, DeviceClass: repairClass}
	_, ids := runningJob(t, ctx, w, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: time.Second})
	return ids[0]
}

// One fault from each source a fleet runs, on a GPU whose Pod says nothing (its kubelet status
// stays Healthy): a report as NVSentinel's template renders it, an XID in the simulated
// dcgm-exporter that the real Prometheus scrapes, and a node condition naming the GPU. Each quarantines exactly its GPU, its Job is
// moved, the GPU is reset, probed, canaried and back in service; the node's other GPUs are never
// fenced.
func TestEachHealthSourceBringsItsGPUBack(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, repairClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "sources", 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	byReport, byDCGM := jobOnGPU(t, ctx, "sources", "by-report", nodes[0]), jobOnGPU(t, ctx, "sources", "by-dcgm", nodes[0])
	byCondition := jobOnGPU(t, ctx, "sources", "by-condition", nodes[0])
	faulted := []device.ID{byReport, byDCGM, byCondition}
	for _, id := range faulted {
		// The GPU is broken until its driver's reset tool runs; kubelet says nothing of it.
		if err := sim.SetFaultKind(ctx, kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 79", sim.FaultTransient); err != nil {
			t.Fatal(err)
		}
	}
	reports, err := app.ReportsClient(shared.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := reports.Create(ctx, nvsentinelReport(t, nodes[0], sim.UUID(byReport)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller takes the first value it reads of a GPU as its baseline: the XID comes once
	// it has read the GPU's series.
	waitSeriesRead(t, sim.UUID(byDCGM))
	if err := sim.SetXID(ctx, kube, byDCGM, 79); err != nil {
		t.Fatal(err)
	}
	// Node Problem Detector's condition, naming the GPU by its UUID in its message.
	setCondition(t, ctx, nodes[0], "XIDErrors", "Xid 48 (DBE) on "+sim.UUID(byCondition))
	for id, cause := range map[device.ID]string{byReport: "nvsentinel: 79", byDCGM: "dcgm: xid:79", byCondition: "npd: XIDErrors"} {
		st := waitState(t, ctx, shared, id, 2*time.Minute, func(st decide.DeviceState) bool { return st.Quarantine != nil || len(st.Closed) > 0 })
		q := st.Quarantine
		if q == nil {
			q = &st.Closed[0] // released already
		}
		if !strings.Contains(q.Reason, cause) {
			t.Fatalf("%s: quarantine %+v, want its cause %q", id, q, cause)
		}
		t.Logf("%s quarantined %s after its fault (%s)", id, q.CreatedAt.Sub(start).Round(time.Millisecond), cause)
	}
	defer func() {
		if t.Failed() {
			for _, id := range faulted {
				var st decide.DeviceState
				_ = queryInto(ctx, shared.temporal, id.WorkflowID(), &st)
				t.Logf("%s: migrations %v, reporters %+v, moving %+v, transitions %+v", id, st.Migrations, st.Reporters, st.Moving, st.Transitions)
			}
		}
	}()
	for _, id := range faulted {
		st := waitState(t, ctx, shared, id, 3*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
		q := st.Closed[len(st.Closed)-1]
		if q.Ladder == nil || len(q.Ladder.Tries) != 1 || q.Ladder.Tries[0].Review != "passed: released" {
			t.Fatalf("%s: ladder %+v", id, q.Ladder)
		}
		if len(st.Migrations) == 0 {
			t.Fatalf("%s: its Job was not moved", id)
		}
		if f, stands, err := sim.FaultOf(ctx, kube, id); stands || err != nil {
			t.Fatalf("%s: the reset left the fault: %+v (%v)", id, f, err)
		}
		t.Logf("%s back in service %s after it was quarantined", id, q.ClosedAt.Sub(q.CreatedAt).Round(time.Millisecond))
	}
	recordHistory(t, ctx, shared.temporal, byDCGM.WorkflowID(), "device_detector_fault_v12.json")
	rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules.Items {
		if sel := r.Spec.DeviceSelector; sel != nil && sel.Pool != nil && *sel.Pool == nodes[0] {
			t.Errorf("rule %s still fences a device of the node: %+v", r.Name, sel)
		}
	}
	for i := range 8 {
		id := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-" + strconv.Itoa(i)}
		if slices.Contains(faulted, id) {
			continue
		}
		var nf *serviceerror.NotFound
		if _, err := shared.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), ""); !errors.As(err, &nf) {
			t.Errorf("%s has a workflow (%v): another GPU of the node was acted on", id, err)
		}
	}
}

// setCondition sets a True node condition, as Node Problem Detector does.
func setCondition(t *testing.T, ctx context.Context, node, kind, msg string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := shared.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(kind), Status: corev1.ConditionTrue,
			Reason: "GPUFault", Message: msg, LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()})
		_, err = shared.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A node condition that names no GPU fences nothing: it reaches the node's workflow, which
// records it and alerts.
func TestANodeConditionNamingNoGPUFencesNothing(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, err := sim.CreateNodes(ctx, shared.kube, "nogpu", 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	setCondition(t, ctx, nodes[0], "XidCriticalError", `{"31":true}`)
	var st escalation.NodeState
	eventually(t, time.Minute, "the node's workflow has the condition", func() error {
		if err := queryInto(ctx, shared.temporal, api.NodeWorkflowID(nodes[0]), &st); err != nil {
			return err
		}
		if len(st.Conditions) != 1 || !strings.Contains(st.Conditions[0], "XidCriticalError") {
			return fmt.Errorf("node state %+v", st)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // a wrong fence would be written by now
	rules, err := shared.kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules.Items {
		if sel := r.Spec.DeviceSelector; sel != nil && sel.Pool != nil && *sel.Pool == nodes[0] {
			t.Errorf("rule %s fences a device of the node: %+v", r.Name, sel)
		}
	}
	if len(st.Failed) != 0 || st.Escalated {
		t.Fatalf("the node counted a failed device: %+v", st)
	}
}

// waitSeriesRead waits until the shared stack's Prometheus has the GPU's XID series, then for
// three of the controller's polls (one a second), after which the controller has read it.
func waitSeriesRead(t *testing.T, uuid string) {
	t.Helper()
	q := shared.prometheus + "/api/v1/query?query=" + url.QueryEscape(`DCGM_FI_DEV_XID_ERRORS{UUID="`+uuid+`"}`)
	eventually(t, time.Minute, "Prometheus has "+uuid+"'s XID series", func() error {
		resp, err := http.Get(q)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var answer struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			return err
		}
		if len(answer.Data.Result) == 0 {
			return errors.New("no series yet")
		}
		return nil
	})
	time.Sleep(3 * time.Second)
}
