package breaker

import (
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
)

// RefusedFor is how long a worker answers for a breaker it saw refuse a budget.
const RefusedFor = 5 * time.Second

// BudgetOf names what a worker keeps refusals and leased batches under: restrictions apart from
// every other action. The breaker may draw both on one budget (SeparateBudgets off); a worker
// keeping them apart only asks the breaker once more.
func BudgetOf(action decide.State) string {
	switch action {
	case decide.Restricted:
		return "restrictions"
	case Reset:
		return "resets"
	case Reboot:
		return "reboots"
	}
	return "actions"
}

// Refusals are the budgets a worker saw the breaker refuse. In a storm thousands of devices ask at
// once: for RefusedFor after a refusal, the worker answers its budget itself with the breaker's
// reason, instead of sending every device to the one breaker workflow.
type Refusals struct {
	seen map[string]refusal
}

type refusal struct {
	until  time.Time
	reason string
}

// Answer is the refusal the worker answers req with at now, if it saw req's budget refused within
// RefusedFor. A device the breaker woke always asks the breaker, and so does a node step: its
// budget is its node pool's, and another pool's refusal says nothing of it. So does a reset:
// resets are few, and one refused for the budget waits in the breaker's list, to be woken when
// a reset ends (State.WakeResets).
func (r *Refusals) Answer(req PermitRequest, now time.Time) (PermitResult, bool) {
	if req.Woken || req.Action == Reboot && req.Node != "" || req.Action == Reset {
		return PermitResult{}, false
	}
	seen, ok := r.seen[BudgetOf(req.Action)]
	if !ok || !now.Before(seen.until) {
		return PermitResult{}, false
	}
	return PermitResult{Reason: seen.reason}, true
}

// Note keeps the breaker's answer res to req at now: a grant forgets its budget's refusal, a
// refusal is kept for RefusedFor, and an open breaker's refusal holds both budgets.
func (r *Refusals) Note(req PermitRequest, res PermitResult, now time.Time) {
	if r.seen == nil {
		r.seen = map[string]refusal{}
	}
	if res.Granted {
		delete(r.seen, BudgetOf(req.Action))
		return
	}
	seen := refusal{until: now.Add(RefusedFor), reason: res.Reason}
	r.seen[BudgetOf(req.Action)] = seen
	if strings.HasPrefix(res.Reason, "circuit breaker open") {
		r.seen[BudgetOf(decide.Quarantined)], r.seen[BudgetOf(decide.Restricted)] = seen, seen
	}
}
