package rollouts

import (
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

// The rollout's activities name the errors no retry can fix: a phase the plan does not have, and
// the API server refusing DeviceWarden's identity. Anything else stays retryable.
func TestRolloutActivitiesNameTheirPermanentErrors(t *testing.T) {
	typeOf := func(err error) (string, bool) {
		var app *temporal.ApplicationError
		if !errors.As(err, &app) {
			return "", false
		}
		return app.Type(), app.NonRetryable()
	}
	env, a, kube := activityEnv(t, poolNode("n1", map[string]string{owner: "plugin"}, 8))
	in := PhaseInput{Plan: rolloutPlan(), Phase: 3}
	for name, fn := range map[string]any{"preflight": a.RolloutPreflight, "enable": a.EnableRolloutPhase} {
		_, err := env.ExecuteActivity(fn, in)
		if typ, final := typeOf(err); typ != ErrInvalidRolloutInput || !final {
			t.Errorf("%s of phase 3 of a one-phase plan: %v, want %s, not retryable", name, err, ErrInvalidRolloutInput)
		}
	}

	refuse := func(err error) {
		kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
	}
	refuse(apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC: access denied")))
	_, err := env.ExecuteActivity(a.EnableRolloutPhase, PhaseInput{Plan: rolloutPlan()})
	if typ, final := typeOf(err); typ != ErrRolloutForbidden || !final {
		t.Errorf("enable refused by RBAC: %v, want %s, not retryable", err, ErrRolloutForbidden)
	}
	refuse(errors.New("connection refused"))
	_, err = env.ExecuteActivity(a.EnableRolloutPhase, PhaseInput{Plan: rolloutPlan()})
	if typ, final := typeOf(err); err == nil || final || typ == ErrRolloutForbidden {
		t.Errorf("enable that cannot reach the API server: %v, want a retryable error", err)
	}
}
