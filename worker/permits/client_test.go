package permits

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// A worker that saw the breaker refuse a budget answers for it for a moment and queues the
// devices for the breaker's wait list; a woken device, and the other budget, still ask.
func TestBreakerClientAnswersForAnOpenBudget(t *testing.T) {
	b := &Client{flushing: true} // no flusher: this test has no Temporal
	gpu := func(n string) breaker.PermitRequest {
		return breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: n}, Action: decide.Restricted}
	}
	if _, ok := b.refuseHere(gpu("gpu-0")); ok {
		t.Fatal("refused before the breaker ever said no")
	}
	b.remember(gpu("gpu-0"), breaker.PermitResult{Reason: "restrictions held: cap"})
	res, ok := b.refuseHere(gpu("gpu-1"))
	if !ok || res.Granted || !strings.Contains(res.Reason, "restrictions held") || len(b.pending) != 1 || b.pending[0] != "d/p/gpu-1" {
		t.Fatalf("refused %v %+v, pending %v", ok, res, b.pending)
	}
	woken := gpu("gpu-2")
	woken.Woken = true
	if _, ok := b.refuseHere(woken); ok {
		t.Fatal("a woken device did not reach the breaker")
	}
	quarantine := gpu("gpu-3")
	quarantine.Action = decide.Quarantined
	if _, ok := b.refuseHere(quarantine); ok {
		t.Fatal("held restrictions refused a quarantine: the budgets are apart")
	}
	b.remember(quarantine, breaker.PermitResult{Reason: "circuit breaker open: cap"})
	if _, ok := b.refuseHere(gpu("gpu-4")); !ok {
		t.Fatal("an open breaker refuses both budgets")
	}
	b.remember(gpu("gpu-5"), breaker.PermitResult{Granted: true})
	if _, ok := b.refuseHere(gpu("gpu-6")); ok {
		t.Fatal("a grant did not clear what this worker remembered")
	}
	b.refused.Note(quarantine, breaker.PermitResult{Reason: "circuit breaker open: cap"}, time.Now().Add(-breaker.RefusedFor))
	if _, ok := b.refuseHere(quarantine); ok {
		t.Fatal("an expired refusal still answered")
	}
}
