//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// startPrometheus runs a Prometheus scraping target every second for the test, and returns its
// base URL.
func startPrometheus(t *testing.T, ctx context.Context, target string) string {
	t.Helper()
	dir := t.TempDir()
	url, stop, err := runPrometheus(ctx, dir, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			data, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", tail(string(data), 4000))
		}
	})
	return url
}

// TestRolloutPromQLGateFailsThePhase: a business SLO read from a real Prometheus that scrapes a
// simulated service. The first phase passes with no errors; during the second the service fails
// 30% of its requests, the query crosses its 5% threshold and the phase is rolled back.
func TestRolloutPromQLGateFailsThePhase(t *testing.T) {
	// Its pools, namespaces, classes and rollouts are its own.
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // includes a first Prometheus build
	defer cancel()
	kube, tc := shared.kube, shared.temporal
	svc := &sim.ServiceMetrics{}
	target, stop, err := svc.Serve()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	prom := startPrometheus(t, ctx, target)
	for _, pool := range []string{"roprom-a", "roprom-b"} {
		if _, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: pool, Count: 1, GPUs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	const gates = `{queries: [{name: error-rate, query: 'sum(rate(sim_requests_total{code="500"}[10s])) / sum(rate(sim_requests_total[10s]))', max: 0.05}]}`
	_, plan := writePlan(t, "prom", "prometheus: "+prom+"\n",
		rolloutPhase{name: "canary", pool: "roprom-a", class: "roprom-a.gpu.sim.devicewarden.io", namespace: "roprom", soak: "12s", gates: gates},
		rolloutPhase{name: "wide", pool: "roprom-b", class: "roprom-b.gpu.sim.devicewarden.io", namespace: "roprom", soak: "15s", gates: gates})
	if _, err := api.StartRollout(ctx, tc, plan); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, tc, plan.Name, time.Minute, "wide soaking", soaking(1))
	svc.SetErrorRate(0.3)
	st := waitRollout(t, ctx, tc, plan.Name, time.Minute, "rolled back", func(st api.RolloutStatus) bool { return st.State == rolloutplan.StateRolledBack })
	if len(st.Reports) != 2 {
		t.Fatalf("reports = %+v", st.Reports)
	}
	canary, wide := st.Reports[0], st.Reports[1]
	if !canary.Passed() || len(canary.Queries) != 1 || canary.Queries[0].Error != "" || canary.Queries[0].Value != 0 {
		t.Fatalf("canary report = %+v", canary)
	}
	if wide.Passed() || len(wide.Queries) != 1 || wide.Queries[0].Value < 0.25 || wide.Queries[0].Value > 0.35 ||
		!strings.Contains(strings.Join(wide.Failed, "|"), "query error-rate") {
		t.Fatalf("wide report = %+v", wide)
	}
	if len(st.Enabled) != 1 || st.Enabled[0].Phase != "canary" {
		t.Fatalf("enabled after the rollback = %+v", st.Enabled)
	}
	if err := tc.TerminateWorkflow(ctx, api.RolloutID(plan.Name), "", "test done"); err != nil {
		t.Fatal(err)
	}
}
