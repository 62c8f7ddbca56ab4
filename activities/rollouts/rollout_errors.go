package rollouts

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// Errors of the rollout's activities that no retry can fix: the rollout stops retrying them at
// once and holds for a person.
const (
	// ErrInvalidRolloutInput: the plan has no such phase.
	ErrInvalidRolloutInput = "InvalidRolloutInput"
	// ErrRolloutForbidden: the API server refuses DeviceWarden what the phase needs (its RBAC; the
	// chart grants node patches and admission policies only with rollout.enabled).
	ErrRolloutForbidden = "RolloutForbidden"
)

// checkPhase refuses, as an error of type errType that is not retried, a phase the plan does not have.
func checkPhase(p rolloutplan.Plan, phase int, errType string) error {
	if phase < 0 || phase >= len(p.Phases) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("plan %s has no phase %d", p.Name, phase), errType, nil)
	}
	return nil
}

// permanent marks an API refusal of DeviceWarden's identity as not retryable; other errors, and
// errors already typed, are returned as they are.
func permanent(err error) error {
	var typed *temporal.ApplicationError
	if err == nil || errors.As(err, &typed) {
		return err
	}
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrRolloutForbidden, err)
	}
	return err
}
