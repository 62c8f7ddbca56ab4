package policy

import (
	"strings"
	"testing"
	"time"
)

func TestMigrationPolicy(t *testing.T) {
	set, err := Parse([]byte(`
default:
  migration: {enabled: true, tenantChannels: {team-a: "#team-a"}}
policies:
  - name: training
    match: {deviceClass: train.gpu.example.com}
    migration: {perNode: 2, checkpointTimeout: 20m}
  - name: inference
    match: {deviceClass: infer.gpu.example.com}
    migration: {enabled: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	def := set.For("other", "d").Migration
	if !def.Enabled || def.PerNode != 1 || def.ClusterWide != 10 || def.CheckpointTimeout.D() != 10*time.Minute || def.EvidenceKeep.D() != 30*24*time.Hour || def.TenantChannels["team-a"] != "#team-a" {
		t.Fatalf("default migration %+v", def)
	}
	tr := set.For("train.gpu.example.com", "d").Migration
	if !tr.Enabled || tr.PerNode != 2 || tr.CheckpointTimeout.D() != 20*time.Minute || tr.ReadyTimeout.D() != 30*time.Minute || tr.TenantChannels["team-a"] != "#team-a" {
		t.Fatalf("training migration %+v", tr)
	}
	if set.For("infer.gpu.example.com", "d").Migration.Enabled {
		t.Fatal("a policy that turned migration off still migrates")
	}
	// Migration with the default NoSchedule effect warns about nothing.
	if w := set.Warnings(); len(w) != 0 {
		t.Fatalf("warnings %v", w)
	}
	if Default().Migration.Enabled {
		t.Fatal("migration must be off unless a policy turns it on")
	}
}

func TestMigrationPolicyErrorsAndWarnings(t *testing.T) {
	for _, tt := range []struct{ yaml, err string }{
		{"policies:\n  - name: a\n    match: {driver: x}\n    migration: {enabled: true, perNode: 0}\n", "migration.perNode and migration.clusterWide must be >= 1"},
		{"default:\n  migration: {enabled: true, perNode: 5, clusterWide: 2}\n", "must not exceed migration.clusterWide"},
		{"default:\n  migration: {enabled: true, readyTimeout: 0s}\n", "must be positive"},
		{"default:\n  migration: {enabled: maybe}\n", "cannot unmarshal"},
		{"default:\n  migration: {enabeld: true}\n", "field enabeld not found"},
	} {
		if _, err := Parse([]byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%q: err %v, want %q", tt.yaml, err, tt.err)
		}
	}
	set, err := Parse([]byte("policies:\n  - name: evicting\n    match: {deviceClass: c}\n    taintEffect: NoExecute\n    migration: {enabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := set.Warnings(); len(w) != 1 || !strings.Contains(w[0], "line 2") || !strings.Contains(w[0], `policy "evicting"`) || !strings.Contains(w[0], "before any checkpoint") {
		t.Fatalf("warnings %v", w)
	}
}
