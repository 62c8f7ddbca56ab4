// Package breaker is the fleet-wide circuit breaker's state, as pure functions: the budgets and
// their window, permits and the leases of permits a worker keeps, the wait list a resume wakes,
// and the refusals a worker answers for a while. The breaker workflow holds one State; the
// typed client in package api reaches it.
package breaker
