package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The shipped Grafana dashboard may only query metrics this package defines.
func TestDashboardUsesDefinedMetrics(t *testing.T) {
	data, err := os.ReadFile("../../deploy/dashboards/devicewarden.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	m := New()
	// Touch every vector so Gather reports it.
	m.WatcherEvents.WithLabelValues("pod", "add")
	m.WatcherReports.WithLabelValues("Healthy")
	m.ResolutionFailures.WithLabelValues("x")
	m.Signals.WithLabelValues("ok")
	m.Quarantines.WithLabelValues("created")
	m.Permits.WithLabelValues("granted")
	m.Alerts.WithLabelValues("info")
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, f := range families {
		defined[f.GetName()] = true
	}
	used := regexp.MustCompile(`devicewarden_[a-z_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range used.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if !defined[base] {
					t.Errorf("panel %q queries %s, which is not defined", p.Title, name)
				}
				n++
			}
		}
	}
	if n < 10 {
		t.Fatalf("dashboard queries only %d metrics", n)
	}
}
