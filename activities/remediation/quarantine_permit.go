package remediation

import (
	"context"

	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/breaker"
)

// ErrPermitUnavailable is the error type of QuarantineWithPermit when the circuit breaker could
// not be asked: the workflow holds the action, as it does when AcquirePermit fails.
const ErrPermitUnavailable = "PermitUnavailable"

// QuarantineWithPermitInput is an automatic quarantine: the permit it needs and the rule it creates.
type QuarantineWithPermitInput struct {
	Permit     PermitInput     `json:"permit"`
	Quarantine QuarantineInput `json:"quarantine"`
}

// QuarantineWithPermitResult is the breaker's answer and, when it granted, the rule.
type QuarantineWithPermitResult struct {
	Permit breaker.PermitResult `json:"permit"`
	Rule   QuarantineResult     `json:"rule"`
}

// QuarantineWithPermit takes the circuit breaker's permit and, when it is granted, creates the
// rule: one local activity on the hot path instead of two. A retry asks again; the worker's
// breaker client answers a repeat within the window from the grant it already made.
func (a *Activities) QuarantineWithPermit(ctx context.Context, in QuarantineWithPermitInput) (QuarantineWithPermitResult, error) {
	permit, err := a.AcquirePermit(ctx, in.Permit)
	if err != nil {
		return QuarantineWithPermitResult{}, temporal.NewApplicationErrorWithCause(err.Error(), ErrPermitUnavailable, err)
	}
	if !permit.Granted {
		return QuarantineWithPermitResult{Permit: permit}, nil
	}
	rule, err := a.Quarantine(ctx, in.Quarantine)
	if err != nil {
		return QuarantineWithPermitResult{}, err
	}
	return QuarantineWithPermitResult{Permit: permit, Rule: rule}, nil
}
