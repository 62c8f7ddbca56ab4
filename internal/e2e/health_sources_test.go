//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"go.temporal.io/api/serviceerror"
	"sigs.k8s.io/yaml"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
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
// stays Healthy): a report as NVSentinel's template renders it, and an XID in the simulated
// dcgm-exporter that the real Prometheus scrapes. Each quarantines exactly its GPU, its Job is
// moved, the GPU is reset, probed, canaried and back in service; the node's other GPUs are never
// fenced.
func TestEachHealthSourceBringsItsGPUBack(t *testing.T) {
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
	for _, id := range []device.ID{byReport, byDCGM} {
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
	if err := sim.SetXID(ctx, kube, byDCGM, 79); err != nil {
		t.Fatal(err)
	}
	for id, cause := range map[device.ID]string{byReport: "nvsentinel: 79", byDCGM: "dcgm: xid:79"} {
		st := waitState(t, ctx, shared, id, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
		if st.Quarantine == nil || !strings.Contains(st.Quarantine.Reason, cause) {
			t.Fatalf("%s: quarantine %+v, want its cause %q", id, st.Quarantine, cause)
		}
		t.Logf("%s quarantined %s after its fault (%s)", id, st.Quarantine.CreatedAt.Sub(start).Round(time.Millisecond), cause)
	}
	for _, id := range []device.ID{byReport, byDCGM} {
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
		if id == byReport || id == byDCGM {
			continue
		}
		var nf *serviceerror.NotFound
		if _, err := shared.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), ""); !errors.As(err, &nf) {
			t.Errorf("%s has a workflow (%v): another GPU of the node was acted on", id, err)
		}
	}
}
