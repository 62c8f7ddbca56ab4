package api

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A worker that saw the breaker refuse a budget answers for it for a moment and queues the
// devices for the breaker's wait list; a woken device, and the other budget, still ask.
func TestBreakerClientAnswersForAnOpenBudget(t *testing.T) {
	b := &BreakerClient{flushing: true} // no flusher: this test has no Temporal
	gpu := func(n string) policy.PermitRequest {
		return policy.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: n}, Action: policy.Restricted}
	}
	if _, ok := b.refuseHere(gpu("gpu-0")); ok {
		t.Fatal("refused before the breaker ever said no")
	}
	b.remember(gpu("gpu-0"), policy.PermitResult{Reason: "restrictions held: cap"})
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
	quarantine.Action = policy.Quarantined
	if _, ok := b.refuseHere(quarantine); ok {
		t.Fatal("held restrictions refused a quarantine: the budgets are apart")
	}
	b.remember(quarantine, policy.PermitResult{Reason: "circuit breaker open: cap"})
	if _, ok := b.refuseHere(gpu("gpu-4")); !ok {
		t.Fatal("an open breaker refuses both budgets")
	}
	b.remember(gpu("gpu-5"), policy.PermitResult{Granted: true})
	if _, ok := b.refuseHere(gpu("gpu-6")); ok {
		t.Fatal("a grant did not clear what this worker remembered")
	}
	b.refused.Note(quarantine, policy.PermitResult{Reason: "circuit breaker open: cap"}, time.Now().Add(-policy.RefusedFor))
	if _, ok := b.refuseHere(quarantine); ok {
		t.Fatal("an expired refusal still answered")
	}
}
