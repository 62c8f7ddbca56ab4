package capacity

import (
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseClaims(t *testing.T) {
	good := []byte(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: a, namespace: t}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu}}]}}
---
metadata: {name: b, namespace: t}
spec: {devices: {requests: [{name: gpu, firstAvailable: [{name: big, deviceClassName: gpu, count: 2}, {name: small, deviceClassName: gpu}]}]}}
`)
	cs, err := ParseClaims(good, "good.yaml")
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
		if _, err := ParseClaims([]byte(c.body), name+".yaml"); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), name+".yaml") {
			t.Errorf("%s: %v, want %q naming the file", name, err, c.want)
		}
	}
}

func TestParseTenants(t *testing.T) {
	if m, err := ParseTenants([]byte("tenants:\n  team-a: [gpu]\n"), "t.yaml"); err != nil || len(m["team-a"]) != 1 {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := ParseTenants([]byte("tenant:\n  team-a: [gpu]\n"), "t.yaml"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := ParseTenants([]byte("tenants:\n  team-a: []\n"), "t.yaml"); err == nil || !strings.Contains(err.Error(), "lists no class") {
		t.Errorf("empty list: %v", err)
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
