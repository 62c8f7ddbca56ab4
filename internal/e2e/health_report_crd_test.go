//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/healthreport"
)

// The DeviceHealthReport CRD on the real apiserver: a report as NVSentinel's template renders it is
// accepted and reads back as this package reads it, its status is written through its own
// subresource, and malformed reports (a health that is no string, no source, an overlong message)
// are refused by the schema.
func TestHealthReportCRDOnTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body, err := healthreport.CRD()
	if err != nil {
		t.Fatal(err)
	}
	err = shared.kube.Discovery().RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg, err := app.KubeConfig(shared.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ContentType = ""
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reports := dyn.Resource(schema.GroupVersionResource{Group: healthreport.Group, Version: healthreport.Version, Resource: healthreport.Resource})
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
	created.Object["status"] = map[string]any{"outcome": healthreport.Refused, "reason": "no such device: no device on node gpu-node-7 publishes uuid=GPU-3b1f5c2e"}
	updated, err := reports.UpdateStatus(ctx, created, metav1.UpdateOptions{})
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
