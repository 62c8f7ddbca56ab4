package metrics

import (
	"testing"

	"github.com/devicewarden/devicewarden/internal/buildinfo"
)

// devicewarden_build_info is 1 with this build's version and revision as labels.
func TestBuildInfo(t *testing.T) {
	families, err := New().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	if !names["go_goroutines"] || !names["process_resident_memory_bytes"] {
		t.Fatal("the Go runtime and process collectors are not registered")
	}
	for _, f := range families {
		if f.GetName() != "devicewarden_build_info" {
			continue
		}
		m := f.GetMetric()
		if len(m) != 1 || m[0].GetGauge().GetValue() != 1 {
			t.Fatalf("build_info = %v", m)
		}
		labels := map[string]string{}
		for _, l := range m[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if bi := buildinfo.Read(); labels["version"] != bi.Version || labels["flavour"] != bi.Flavour || labels["revision"] != bi.Revision || labels["goversion"] != bi.GoVersion {
			t.Fatalf("labels = %v", labels)
		}
		return
	}
	t.Fatal("no devicewarden_build_info")
}
