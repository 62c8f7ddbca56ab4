package policy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	var d JSONDuration = 5
	if err := json.Unmarshal([]byte("null"), &d); err != nil || d != 0 {
		t.Fatalf("null: %v %v", d, err)
	}
	for _, bad := range []string{`"soon"`, `"5"`, `true`, `"\x"`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s accepted as %v", bad, d)
		}
	}
	if err := json.Unmarshal([]byte(` "48h" `), &d); err != nil || d.D() != 48*time.Hour {
		t.Fatalf("48h: %v %v", d, err)
	}
}

func TestUnnamedPolicyIsNumbered(t *testing.T) {
	_, err := Parse([]byte("policies:\n  - name: a\n    match: {deviceClass: x}\n  - match: {deviceClass: y}\n"))
	if err == nil || !strings.Contains(err.Error(), "policy 2 has no name") {
		t.Fatalf("err %v", err)
	}
}

func TestMatchByClassAndDriver(t *testing.T) {
	set, err := Parse([]byte("drivers:\n  a.example.com: {identity: [uuid]}\npolicies:\n  - name: both\n    match: {deviceClass: gpu, driver: a.example.com}\n    escalationThreshold: 9\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := set.For("gpu", "a.example.com"); p.Name != "both" {
		t.Fatalf("class and driver: %s", p.Name)
	}
	if p := set.For("gpu", "b.example.com"); p.Name != "default" {
		t.Fatalf("same class, other driver: %s", p.Name)
	}
}

// The edges of the ranges a policy may name are inside them: one not-run before the alert, the
// longest not-run wait, the most quarantines before retirement.
func TestRangeEdgesLoad(t *testing.T) {
	body := "policies:\n  - name: p\n    match: {deviceClass: gpu}\n    notRunAlertAfter: 1\n    notRunRetry: 30m\n    repair: {retireAfter: 20}\n"
	set, err := Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if p := set.For("gpu", ""); p.NotRunAlertAfter != 1 || p.NotRunRetry.D() != MaxNotRunRetry || p.Repair.RetireAfter != MaxRetireAfter {
		t.Fatalf("policy %+v", p)
	}
	for _, bad := range []string{"notRunAlertAfter: 0", "notRunRetry: 31m", "repair: {retireAfter: 21}"} {
		if _, err := Parse([]byte("policies:\n  - name: p\n    match: {deviceClass: gpu}\n    " + bad + "\n")); err == nil {
			t.Errorf("%s loaded", bad)
		}
	}
}
