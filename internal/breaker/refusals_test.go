package breaker

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

func TestRefusals(t *testing.T) {
	t0 := time.Unix(1000, 0)
	req := func(a decide.State) PermitRequest {
		return PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "g"}, Action: a}
	}
	var r Refusals
	if _, ok := r.Answer(req(decide.Quarantined), t0); ok {
		t.Fatal("answered before any refusal")
	}
	r.Note(req(decide.Restricted), PermitResult{Reason: "restrictions held"}, t0)
	if res, ok := r.Answer(req(decide.Restricted), t0.Add(RefusedFor-time.Nanosecond)); !ok || res.Granted || res.Reason != "restrictions held" {
		t.Errorf("within RefusedFor: %+v %v", res, ok)
	}
	if _, ok := r.Answer(req(decide.Restricted), t0.Add(RefusedFor)); ok {
		t.Error("still answered once RefusedFor passed")
	}
	if _, ok := r.Answer(req(decide.Quarantined), t0); ok {
		t.Error("a held restriction refused a quarantine")
	}
	woken := req(decide.Restricted)
	woken.Woken = true
	if _, ok := r.Answer(woken, t0); ok {
		t.Error("a woken device was answered locally")
	}
	r.Note(req(decide.Quarantined), PermitResult{Reason: "circuit breaker open: 20 in 10m"}, t0)
	if _, ok := r.Answer(req(decide.Restricted), t0.Add(RefusedFor-time.Nanosecond)); !ok {
		t.Error("an open breaker did not hold restrictions too")
	}
	r.Note(req(decide.Quarantined), PermitResult{Granted: true}, t0)
	if _, ok := r.Answer(req(decide.Quarantined), t0); ok {
		t.Error("a grant did not forget its budget's refusal")
	}
	if _, ok := r.Answer(req(decide.Restricted), t0); !ok {
		t.Error("a quarantine's grant forgot the restrictions' refusal")
	}
	if BudgetOf(decide.Restricted) == BudgetOf(decide.Quarantined) || BudgetOf(decide.Quarantined) != BudgetOf(migrationplan.ActionMigrate) {
		t.Error("budgets: restrictions apart, every other action together")
	}
}
