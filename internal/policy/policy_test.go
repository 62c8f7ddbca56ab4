package policy

import (
	"strings"
	"testing"
	"time"
)

const good = `
default:
  toleranceWindow: 2m
policies:
  - name: a100
    match: {deviceClass: gpu.example.com}
    toleranceWindow: 10m
    backoffCap: 2h
    approvalRequired: true
  - name: nics
    match: {driver: nic.example.com}
    taintEffect: NoExecute
`

func TestParseAndMatch(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		class, driver string
		wantName      string
		wantTolerance time.Duration
	}{
		{"gpu.example.com", "gpu.example.com", "a100", 10 * time.Minute},
		{"other", "nic.example.com", "nics", 2 * time.Minute},
		{"other", "other", "default", 2 * time.Minute},
	}
	for _, tt := range tests {
		p := s.For(tt.class, tt.driver)
		if p.Name != tt.wantName || p.ToleranceWindow != tt.wantTolerance {
			t.Errorf("For(%s, %s) = %s/%s, want %s/%s", tt.class, tt.driver, p.Name, p.ToleranceWindow, tt.wantName, tt.wantTolerance)
		}
	}
	if p := s.For("gpu.example.com", "x"); !p.ApprovalRequired || p.HeartbeatLimit != Default().HeartbeatLimit {
		t.Errorf("overrides not layered on the default: %+v", p)
	}
	if p := s.For("", "nic.example.com"); p.TaintEffect != EffectNoExecute {
		t.Errorf("effect = %s", p.TaintEffect)
	}
}

func TestEmptyFileIsTheDefault(t *testing.T) {
	s, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.For("x", "y") != Default() {
		t.Fatal("empty file is not the default policy")
	}
}

func TestBrokenFilesAreRejectedWithTheLine(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"bad duration", "policies:\n  - name: a\n    match: {driver: d}\n    toleranceWindow: soon\n", "line 4"},
		{"unknown field", "policies:\n  - name: a\n    match: {driver: d}\n    tolerance: 5m\n", "line 4"},
		{"bad effect", "policies:\n  - name: a\n    match: {driver: d}\n    taintEffect: Evict\n", "line 2"},
		{"matches nothing", "policies:\n  - name: a\n", "line 2"},
		{"no name", "policies:\n  - match: {driver: d}\n", "line 2"},
		{"duplicate name", "policies:\n  - name: a\n    match: {driver: d}\n  - name: a\n    match: {driver: e}\n", "line 4"},
		{"cap below window", "default:\n  toleranceWindow: 2h\n", "backoffCap"},
		{"negative", "default:\n  heartbeatLimit: -1m\n", "heartbeatLimit"},
		{"not yaml", "policies: [\n", "line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

func TestShippedExampleParses(t *testing.T) {
	s, err := LoadFile("../../deploy/examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := s.For("gpu.sim.devicewarden.io", "gpu.sim.devicewarden.io"); p.Name != "training-gpus" || !p.ApprovalRequired {
		t.Fatalf("example policy = %+v", p)
	}
}
