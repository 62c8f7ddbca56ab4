//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// The DeviceHealthReport CRD on the real apiserver: a report as NVSentinel's template renders it is
// accepted and reads back as this package reads it, its status is written through its own
// subresource, and malformed reports (a health that is no string, no source, an overlong message)
// are refused by the schema.
func TestHealthReportCRDOnTheAPIServer(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.InstallReportCRD(ctx, shared.kube); err != nil {
		t.Fatal(err)
	}
	reports, err := app.ReportsClient(shared.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	report := func(spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": healthreport.Group + "/" + healthreport.Version,
			"kind": healthreport.Kind, "metadata": map[string]any{"generateName": "nvsentinel-"}, "spec": spec}}
	}
	good := map[string]any{"node": "gpu-node-7", "attribute": map[string]any{"name": "uuid", "value": "GPU-3b1f5c2e"}, "health": "Unhealthy",
		"cause": map[string]any{"code": "79", "recommendedAction": "RESTART_BM"}, "message": "XID 79: GPU has fallen off the bus", "source": "nvsentinel"}
	var created *unstructured.Unstructured
	eventually(t, 30*time.Second, "the CRD served and a report created", func() error {
		var err error
		created, err = reports.Create(ctx, report(good), metav1.CreateOptions{})
		return err
	})
	r, err := healthreport.FromObject(created.Object)
	if err != nil || r.Spec.Attribute == nil || r.Spec.Attribute.Value != "GPU-3b1f5c2e" || r.Spec.Cause.Code != "79" || r.Spec.Check() != nil {
		t.Fatalf("read back %+v, %v", r, err)
	}
	// The shared stack's watcher reads the report too and may write its status first: this write
	// is made on the report as it stands.
	var updated *unstructured.Unstructured
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := reports.Get(ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Object["status"] = map[string]any{"outcome": healthreport.Refused, "reason": "no such device: no device on node gpu-node-7 publishes uuid=GPU-3b1f5c2e"}
		updated, err = reports.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := healthreport.FromObject(updated.Object); r.Status.Outcome != healthreport.Refused || !strings.HasPrefix(r.Status.Reason, "no such device") {
		t.Fatalf("status %+v", r.Status)
	}
	for name, edit := range map[string]func(map[string]any){
		"a health that is no string": func(s map[string]any) { s["health"] = 3 },
		"no source":                  func(s map[string]any) { delete(s, "source") },
		"an overlong message":        func(s map[string]any) { s["message"] = strings.Repeat("x", healthreport.MaxMessage+1) },
		"an attribute with no value": func(s map[string]any) { s["attribute"] = map[string]any{"name": "uuid"} },
	} {
		spec := map[string]any{}
		for k, v := range good {
			spec[k] = v
		}
		edit(spec)
		if _, err := reports.Create(ctx, report(spec), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("%s: created (%v), want refused by the schema", name, err)
		}
	}
}

// A detector's report (as NVSentinel's template renders it: a GPU's UUID on its node) quarantines
// exactly that GPU through the shared stack's watcher, and its status says its workflow has the fault;
// a report whose UUID no device publishes is refused and fences nothing.
func TestAReportQuarantinesItsDevice(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := shared.kube
	nodes, err := sim.CreateNodes(ctx, kube, "report", 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	bad := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-5"}
	reports, err := app.ReportsClient(shared.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	report := func(name, uuid string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": healthreport.Group + "/" + healthreport.Version, "kind": healthreport.Kind,
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{"node": nodes[0], "attribute": map[string]any{"name": "uuid", "value": uuid}, "health": "Unhealthy",
				"cause": map[string]any{"code": "79", "recommendedAction": "RESTART_BM"}, "message": "XID 79: GPU has fallen off the bus", "source": "nvsentinel"}}}
	}
	if _, err := reports.Create(ctx, report("report-gpu-5", sim.UUID(bad)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reports.Create(ctx, report("report-nothing", "GPU-00000000-0000-0000-0000-000000000000"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, shared, bad, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	if st.Quarantine == nil || !strings.Contains(st.Quarantine.Reason, "nvsentinel: 79") {
		t.Fatalf("quarantine %+v", st.Quarantine)
	}
	status := func(name string) healthreport.Status {
		u, err := reports.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, _ := healthreport.FromObject(u.Object)
		return r.Status
	}
	eventually(t, 30*time.Second, "both statuses", func() error {
		if s := status("report-gpu-5"); s.Outcome != healthreport.Delivered || s.Device != bad.String() || s.Workflow != bad.WorkflowID() {
			return fmt.Errorf("resolved report: %+v", s)
		}
		if s := status("report-nothing"); s.Outcome != healthreport.Refused || !strings.Contains(s.Reason, "no such device") {
			return fmt.Errorf("refused report: %+v", s)
		}
		return nil
	})
	rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules.Items {
		if sel := r.Spec.DeviceSelector; sel != nil && sel.Pool != nil && *sel.Pool == nodes[0] && (sel.Device == nil || *sel.Device != bad.Device) {
			t.Errorf("rule %s fences another device of the node: %+v", r.Name, sel)
		}
	}
	if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("no rule for %s: %v", bad, err)
	}
}
