package capacity

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestLoadClaims(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: a, namespace: t}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu}}]}}
---
metadata: {name: b, namespace: t}
spec: {devices: {requests: [{name: gpu, firstAvailable: [{name: big, deviceClassName: gpu, count: 2}, {name: small, deviceClassName: gpu}]}]}}
`)
	cs, err := LoadClaims(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].UID == "" || cs[0].UID == cs[1].UID {
		t.Fatalf("claims = %+v", cs)
	}
	if r := cs[0].Spec.Devices.Requests[0].Exactly; r.AllocationMode != resourcev1.DeviceAllocationModeExactCount || r.Count != 1 {
		t.Errorf("defaults not applied: %+v", r)
	}
	if s := cs[1].Spec.Devices.Requests[0].FirstAvailable; s[0].Count != 2 || s[1].Count != 1 {
		t.Errorf("subrequest defaults: %+v", s)
	}
	for name, c := range map[string]struct{ body, want string }{
		"broken":      {"metadata: {name: [\n", "document 1"},
		"unknown":     {"metadata: {name: a}\nspec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu}}]}}\nstatuss: {}\n", "unknown field"},
		"kind":        {"kind: Pod\nmetadata: {name: a}\nspec: {devices: {requests: [{name: g}]}}\n", "is a Pod"},
		"no requests": {"metadata: {name: a}\n", "no device requests"},
		"empty":       {"\n---\n", "no ResourceClaim"},
		"second":      {"metadata: {name: a}\nspec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu}}]}}\n---\nmetadata: {name: [\n", "document 2"},
	} {
		if _, err := LoadClaims(write(name+".yaml", c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if _, err := LoadClaims(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read claims") {
		t.Errorf("missing: %v", err)
	}
}

func TestLoadTenants(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "t.yaml")
	_ = os.WriteFile(p, []byte("tenants:\n  team-a: [gpu]\n"), 0o644)
	if m, err := LoadTenants(p); err != nil || len(m["team-a"]) != 1 {
		t.Fatalf("%v %v", m, err)
	}
	_ = os.WriteFile(p, []byte("tenant:\n  team-a: [gpu]\n"), 0o644)
	if _, err := LoadTenants(p); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("unknown field: %v", err)
	}
	_ = os.WriteFile(p, []byte("tenants:\n  team-a: []\n"), 0o644)
	if _, err := LoadTenants(p); err == nil || !strings.Contains(err.Error(), "lists no class") {
		t.Errorf("empty list: %v", err)
	}
	if _, err := LoadTenants(filepath.Join(dir, "none")); err == nil {
		t.Errorf("missing file accepted")
	}
}

func TestReadCluster(t *testing.T) {
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, sharedSlice("n1", 1), gpuClass(),
		claim("t", "a", "gpu", share{"gpu", "gpu-0", "s1", "8Gi"}),
		&resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "r"}}}
	cs := fake.NewClientset(objs...)
	c, err := ReadCluster(context.Background(), cs)
	if err != nil || len(c.Nodes) != 1 || len(c.Slices) != 1 || len(c.Classes) != 1 || len(c.Claims) != 1 || len(c.TaintRules) != 1 {
		t.Fatalf("cluster = %+v %v", c, err)
	}
	for _, res := range []string{"nodes", "resourceslices", "deviceclasses", "resourceclaims", "devicetaintrules"} {
		broken := fake.NewClientset(objs...)
		broken.PrependReactor("list", res, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("apiserver unavailable")
		})
		if _, err := ReadCluster(context.Background(), broken); err == nil || !strings.Contains(err.Error(), "apiserver unavailable") {
			t.Errorf("%s: %v", res, err)
		}
	}
}

func TestDevicesOfAnAnswer(t *testing.T) {
	if got := Devices(NodeFit{Node: "n1"}); got != "-" {
		t.Errorf("no allocation: %q", got)
	}
	f := NodeFit{Results: []resourcev1.AllocationResult{{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Driver: drv, Pool: "n1", Device: "gpu-0", ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": q("8Gi")}},
		{Driver: drv, Pool: "n1", Device: "gpu-1"}}}}}}
	if got := Devices(f); got != drv+"/n1/gpu-0 (8Gi), "+drv+"/n1/gpu-1" {
		t.Errorf("devices = %q", got)
	}
	if Bytes(2800<<30) != "2800Gi" {
		t.Errorf("bytes = %s", Bytes(2800<<30))
	}
}

func TestSmallestOfValidValuesInAnyOrder(t *testing.T) {
	for _, vals := range [][]resource.Quantity{{q("8Gi"), q("2Gi"), q("4Gi")}, {q("2Gi"), q("8Gi")}, {q("8Gi"), q("4Gi"), q("2Gi")}} {
		if got := SmallestRequest(&resourcev1.CapacityRequestPolicy{ValidValues: vals}); got != 2<<30 {
			t.Errorf("%v: %d", vals, got)
		}
	}
}
