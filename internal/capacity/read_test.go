package capacity

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
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
