package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// A phase whose enable failed shows as partly enabled, with what resume and rollback do.
func TestPrintRolloutShowsAPartlyEnabledPhase(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := &api.RolloutStatus{Plan: "gpu", State: "blocked", Enabled: []rolloutplan.PhaseChange{
		{Phase: "canary", At: at, Nodes: []rolloutplan.NodeChange{{Node: "a"}, {Node: "b"}}},
		{Phase: "wide", At: at, Partial: true},
	}}
	var out bytes.Buffer
	if err := printRollout(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"canary on 2 node(s) at 2026-12-01T12:00:00Z", "wide partly: its enable failed at 2026-12-01T12:00:00Z (resume finishes it, rollback routes its switched nodes back)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// An enforcement proof shows its verdict, inputs, each load's figures and why it failed; a
// person's soft-quota approval and the proof's block show too.
func TestPrintRolloutShowsProofs(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rep := rolloutplan.ProofReport{Phase: "shared", Class: "gpu-s", Node: "n1", Device: "n1/gpu-0", Capacity: "memory", CapacityValue: "40Gi", Share: "8Gi",
		Noisy: 4, Tolerance: 0.1, Duration: time.Minute, At: at, Group: rolloutplan.ProofGroup{DriverVersion: "1.2.0", NodeType: "a100"},
		Baseline: rolloutplan.LoadResult{Throughput: 1000, P99Ms: 10},
		Tenants:  []rolloutplan.TenantFigures{{Pod: "p-0", ShareID: "s0", Role: rolloutplan.RoleNoisy, Fraction: 0.2, Expected: 200, Result: rolloutplan.LoadResult{Throughput: 667, P99Ms: 12}}}}
	rep.Judge()
	st := &api.RolloutStatus{Plan: "gpu", State: "waiting-approval", Proofs: []rolloutplan.ProofReport{rep},
		Blocks:     []api.BlockInput{{Phase: "shared", Classes: []string{"gpu-s"}, Reason: "its enforcement proof has not passed yet", Except: "devicewarden-proof"}},
		SoftQuotas: []api.SoftQuota{{Phase: "shared", Classes: []string{"gpu-s"}, Actor: "sre", At: at, Proof: "noisy tenant p-0 got 667/s"}}}
	var out bytes.Buffer
	if err := printRollout(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NOT ENFORCED on n1 n1/gpu-0 (driver 1.2.0 on a100, class gpu-s) at 2026-12-01T12:00:00Z",
		"1 tenants of 8Gi of 40Gi memory each, the noisy one trying 4x; tolerance 10%; 1m0s per load",
		"baseline:", "1000.0/s p99 10.00ms drops 0 errors 0",
		"ShareID s0, 20% of the device: 667.0/s (share 200.0/s) p99 12.00ms",
		"why:", "noisy tenant p-0 (ShareID s0) got 667/s, 3.33x its share",
		"[gpu-s] (phase shared: its enforcement proof has not passed yet; the proof's namespace devicewarden-proof excepted)",
		"[gpu-s] of phase shared labelled soft quota, no QoS: approved by sre at 2026-12-01T12:00:00Z (noisy tenant p-0 got 667/s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
