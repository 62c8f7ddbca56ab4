package rolloutplan

import (
	"strings"
	"testing"
	"time"
)

func TestParseTwoPhasePlan(t *testing.T) {
	p, err := LoadFile("testdata/two-phase.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "gpu-dra" || len(p.Phases) != 2 || p.Plugin != "plugin" || p.DRA != "dra" {
		t.Fatalf("plan = %+v", p)
	}
	if p.RollbackHold.D() != DefaultRollbackHold {
		t.Errorf("rollbackHold = %s, want the default", p.RollbackHold)
	}
	c := p.Phases[0]
	if c.Soak.D() != 30*time.Second || !c.Approve || c.Gates.MinClaims != 1 {
		t.Errorf("canary = %+v", c)
	}
	if c.Gates.ClaimToAllocated.P50.D() != 5*time.Second || c.Gates.ClaimToAllocated.P99.D() != 15*time.Second {
		t.Errorf("claimToAllocated = %+v", c.Gates.ClaimToAllocated)
	}
	if c.Gates.AllocatedToReady.P50 != 0 || c.Gates.AllocatedToReady.P99.D() != 30*time.Second {
		t.Errorf("allocatedToReady = %+v", c.Gates.AllocatedToReady)
	}
	if *c.Gates.MaxDrift != 0 || c.Gates.AllocationFailures.Retryable != 2 {
		t.Errorf("gates = %+v", c.Gates)
	}
	if p.Phases[1].Approve || *p.Phases[1].Gates.MaxFragmentation != 0.25 || p.Phases[1].Gates.MaxDrift != nil {
		t.Errorf("tenants = %+v", p.Phases[1])
	}
	ns := p.AllowedNamespaces(1)
	if len(ns) != 3 || !ns["canary"] || !ns["team-b"] {
		t.Errorf("allowed namespaces of phase 2 = %v", ns)
	}
	if len(p.AllowedNamespaces(0)) != 1 {
		t.Errorf("allowed namespaces of phase 1 = %v", p.AllowedNamespaces(0))
	}
}

// TestParseRejects: each broken plan is refused with the line at fault and a reason.
func TestParseRejects(t *testing.T) {
	const head = "name: r\npluginResource: x.io/gpu\nphases:\n"
	const phase = "  - name: a\n    nodes: pool=a\n    classes: [{name: c, driver: d}]\n    namespaces: [t]\n    soak: 1m\n"
	cases := []struct{ name, yaml, want string }{
		{"empty", "", "empty plan"},
		{"not yaml", "name: [", "line 1"},
		{"unknown field", head + phase + "    sok: 1m\n", "line 9: field sok not found"},
		{"bad name", "name: Bad_Name\npluginResource: x\nphases: []\n", "line 1: name \"Bad_Name\""},
		{"no plugin resource", "name: r\nphases: []\n", "pluginResource is required"},
		{"same owner values", "name: r\nplugin: x\ndra: x\npluginResource: y\nphases: []\n", "line 3: plugin and dra are both"},
		{"bad hold", "name: r\npluginResource: y\nrollbackHold: soon\n" + "phases:\n" + phase, "line 3: rollbackHold"},
		{"no phases", "name: r\npluginResource: y\nphases: []\n", "line 3: the plan has no phases"},
		{"empty selector", head + strings.Replace(phase, "pool=a", "''", 1), "line 5: phase \"a\": nodes"},
		{"bad selector", head + strings.Replace(phase, "pool=a", "'pool in (a'", 1), "line 5: phase \"a\": nodes"},
		{"no classes", head + strings.Replace(phase, "[{name: c, driver: d}]", "[]", 1), "line 6: phase \"a\" names no classes"},
		{"class without driver", head + strings.Replace(phase, ", driver: d", "", 1), "line 6: phase \"a\": every class needs"},
		{"no namespaces", head + strings.Replace(phase, "[t]", "[]", 1), "line 7: phase \"a\" names no tenant"},
		{"bad soak", head + strings.Replace(phase, "soak: 1m", "soak: 0s", 1), "line 8: phase \"a\": soak"},
		{"duplicate phase", head + phase + phase, "line 9: phase name \"a\" is used twice"},
		{"bad latency", head + phase + "    gates: {claimToAllocated: {p99: fast}}\n", "line 9: phase \"a\": gates: claimToAllocated.p99"},
		{"empty latency", head + phase + "    gates: {allocatedToReady: {}}\n", "allocatedToReady sets neither"},
		{"fragmentation over 1", head + phase + "    gates: {maxFragmentation: 1.5}\n", "maxFragmentation 1.5"},
		{"negative drift", head + phase + "    gates: {maxDrift: -1}\n", "maxDrift -1"},
		{"negative cross", head + phase + "    gates: {maxCrossNamespace: -1}\n", "maxCrossNamespace -1"},
		{"negative failures", head + phase + "    gates: {allocationFailures: {retryable: -1}}\n", "must not be negative"},
		{"negative min claims", head + phase + "    gates: {minClaims: -2}\n", "minClaims -2"},
		{"query without bound", "prometheus: http://p\n" + head + phase + "    gates: {queries: [{name: q, query: up}]}\n", "sets neither max nor min"},
		{"query twice", "prometheus: http://p\n" + head + phase + "    gates: {queries: [{name: q, query: up, max: 1}, {name: q, query: up, max: 1}]}\n", "\"q\" is used twice"},
		{"query without prometheus", head + phase + "    gates: {queries: [{name: q, query: up, max: 1}]}\n", "names no prometheus"},
		{"onNoData unknown", "prometheus: http://p\n" + head + phase + "    gates: {queries: [{name: q, query: up, max: 1, onNoData: ignore}]}\n", `onNoData "ignore": want fail, pass or wait`},
		{"NaN bound", "prometheus: http://p\n" + head + phase + "    gates: {queries: [{name: q, query: up, max: .nan}]}\n", "a bound of NaN compares with nothing"},
		{"infinite bound", "prometheus: http://p\n" + head + phase + "    gates: {queries: [{name: q, query: up, min: -.inf}]}\n", "a bound of -Inf compares with nothing"},
		{"NaN fragmentation", head + phase + "    gates: {maxFragmentation: .nan}\n", "maxFragmentation NaN: want a fraction"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestLoadFileNamesTheFile(t *testing.T) {
	if _, err := LoadFile("testdata/missing.yaml"); err == nil || !strings.Contains(err.Error(), "read plan") {
		t.Errorf("missing file: %v", err)
	}
}

// TestExamplePlanParses keeps the example plan the README points at valid.
func TestExamplePlanParses(t *testing.T) {
	p, err := LoadFile("../../deploy/examples/rollout-plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Phases) != 3 || p.RollbackHold.D() != 72*time.Hour {
		t.Errorf("plan = %+v", p)
	}
	if e := p.Phases[2].Enforcement; e == nil || e.OnUnenforced != UnenforcedApprove || !p.Phases[2].Classes[0].Shared {
		t.Errorf("shared phase = %+v", p.Phases[2])
	}
}
