package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

type fakeFlows struct{ asked int }

func (f *fakeFlows) Migration(_ context.Context, id string) (migrationplan.MigrationState, error) {
	f.asked++
	if strings.HasSuffix(id, "/gone") {
		return migrationplan.MigrationState{}, errors.New("workflow not found")
	}
	return migrationplan.MigrationState{Phase: migrationplan.PhaseWaitingForDecision, Waiting: "a person's decision: the checkpoint timed out",
		Steps: []migrationplan.Step{{At: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC), What: "asked for a checkpoint"}}}, nil
}

func (f *fakeFlows) Rollout(_ context.Context, id string) (api.RolloutStatus, error) {
	f.asked++
	return api.RolloutStatus{Plan: "h100-dra", Phase: 1, Step: rolloutplan.StepPreflight, State: rolloutplan.StateRunning,
		SoakUntil:  time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC),
		Violations: []rolloutplan.Violation{{Node: "n3", Reason: "p99 allocation latency 9s over the gate's 2s"}},
		Log:        []api.RolloutEntry{{At: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), Text: "phase canary enabled"}},
		Unproven:   "shared", Awaiting: "shared",
		Proofs: []rolloutplan.ProofReport{{Phase: "canary", Node: "n1", Device: "n1/gpu-0", Enforced: true, Share: "8Gi", Tenants: make([]rolloutplan.TenantFigures, 3)},
			{Phase: "shared", Node: "n2", Device: "n2/gpu-1", Group: rolloutplan.ProofGroup{DriverVersion: "1.1.0", NodeType: "a100"}, Reasons: []string{"noisy tenant x got 3.33x its share"}}},
		SoftQuotas: []api.SoftQuota{{Phase: "older", Classes: []string{"gpu-old"}, Actor: "sre", At: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}}}, nil
}

// A migration's page says where it stands and what it did; a rollout's its phase, soak, the gates
// it has not met and its story; each is asked once per refresh, and a bad request is refused.
func TestFlowPages(t *testing.T) {
	f := &fakeFlows{}
	s := &Server{Cache: &Cache{Fleet: &fakeFleet{}, Cluster: fakeCluster{}, Refresh: time.Hour}, Flows: f, UIURL: "http://ui"}
	h, err := s.Handler()
	if err != nil {
		t.Fatal(err)
	}
	base := newTestServer(t, h)
	_, body := get(t, base+"/migration?id=migrate/d/p/gpu-1/uid/10")
	for _, want := range []string{`id="phase">WaitingForDecision: a person&#39;s decision`, "asked for a checkpoint", `href="http://ui/namespaces/default/workflows/migrate%2Fd%2Fp%2Fgpu-1%2Fuid%2F10"`} {
		if !strings.Contains(body, want) {
			t.Errorf("migration page lacks %q", want)
		}
	}
	get(t, base+"/migration?id=migrate/d/p/gpu-1/uid/10")
	if f.asked != 1 {
		t.Fatalf("asked %d times within a refresh", f.asked)
	}
	if _, body := get(t, base+"/migration?id=migrate/gone"); !strings.Contains(body, `<div class="errors">workflow not found</div>`) {
		t.Errorf("a migration that is gone: %s", body)
	}
	_, body = get(t, base+"/rollout?id=rollout/h100-dra")
	for _, want := range []string{`id="phase">1, step`, "Soak until</dt><dd>2026-12-03 11:00:00Z", "p99 allocation latency 9s", "phase canary enabled",
		"phase shared was not proven to enforce its shares", `<td class="proof">enforced: 3 tenants held to 8Gi each</td>`,
		`<td class="mono">n2 n2/gpu-1</td><td>driver 1.1.0 on a100</td><td class="proof">NOT enforced: noisy tenant x got 3.33x its share</td>`,
		`<td class="mono">gpu-old </td><td>sre</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("rollout page lacks %q", want)
		}
	}
	if code, _ := get(t, base+"/rollout"); code != http.StatusBadRequest {
		t.Fatalf("no id: %d", code)
	}
	s2 := &Server{Cache: &Cache{Fleet: &fakeFleet{}, Cluster: fakeCluster{}}}
	h2, _ := s2.Handler()
	if _, body := get(t, newTestServer(t, h2)+"/rollout?id=x"); !strings.Contains(body, "no rollouts to read") {
		t.Errorf("a console without flows: %s", body)
	}
}
