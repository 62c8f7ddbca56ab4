package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// definedNames lists every metric name the registry describes, vectors without children included.
func definedNames(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() { New().Registry.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	defined := map[string]bool{}
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			defined[m[1]] = true
		}
	}
	if !defined["devicewarden_watcher_queue_depth"] {
		t.Fatalf("descriptors not read: %v", defined)
	}
	return defined
}

// The chart's alert rules may only query metrics this package defines.
func TestAlertRulesUseDefinedMetrics(t *testing.T) {
	data, err := os.ReadFile("../../deploy/helm/devicewarden/templates/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defined := definedNames(t)
	names := regexp.MustCompile(`devicewarden_[a-z_]+`).FindAllString(string(data), -1)
	for _, name := range names {
		if !defined[name] {
			t.Errorf("an alert queries %s, which is not defined", name)
		}
	}
	if len(names) < 12 {
		t.Fatalf("the rules query only %d metrics", len(names))
	}
}

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
	defined := definedNames(t)
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
