package policy

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

// A refusal is answered locally until RefusedFor has passed, for its budget only, unless the
// breaker was open (both budgets); a grant forgets it, and a woken device always asks.
func TestRefusals(t *testing.T) {
	t0 := time.Unix(1000, 0)
	req := func(a State) PermitRequest {
		return PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "g"}, Action: a}
	}
	var r Refusals
	if _, ok := r.Answer(req(Quarantined), t0); ok {
		t.Fatal("answered before any refusal")
	}
	r.Note(req(Restricted), PermitResult{Reason: "restrictions held"}, t0)
	if res, ok := r.Answer(req(Restricted), t0.Add(RefusedFor-time.Nanosecond)); !ok || res.Granted || res.Reason != "restrictions held" {
		t.Errorf("within RefusedFor: %+v %v", res, ok)
	}
	if _, ok := r.Answer(req(Restricted), t0.Add(RefusedFor)); ok {
		t.Error("still answered once RefusedFor passed")
	}
	if _, ok := r.Answer(req(Quarantined), t0); ok {
		t.Error("a held restriction refused a quarantine")
	}
	woken := req(Restricted)
	woken.Woken = true
	if _, ok := r.Answer(woken, t0); ok {
		t.Error("a woken device was answered locally")
	}
	r.Note(req(Quarantined), PermitResult{Reason: "circuit breaker open: 20 in 10m"}, t0)
	if _, ok := r.Answer(req(Restricted), t0.Add(RefusedFor-time.Nanosecond)); !ok {
		t.Error("an open breaker did not hold restrictions too")
	}
	r.Note(req(Quarantined), PermitResult{Granted: true}, t0)
	if _, ok := r.Answer(req(Quarantined), t0); ok {
		t.Error("a grant did not forget its budget's refusal")
	}
	if _, ok := r.Answer(req(Restricted), t0); !ok {
		t.Error("a quarantine's grant forgot the restrictions' refusal")
	}
	if BudgetOf(Restricted) == BudgetOf(Quarantined) || BudgetOf(Quarantined) != BudgetOf(ActionMigrate) {
		t.Error("budgets: restrictions apart, every other action together")
	}
}
