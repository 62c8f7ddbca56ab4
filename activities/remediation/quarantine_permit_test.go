package remediation

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
)

// TestQuarantineWithPermit: the rule is created only with the breaker's permit, and a breaker
// that cannot be asked fails with its own error type, so the workflow can tell it from a failed taint.
func TestQuarantineWithPermit(t *testing.T) {
	in := QuarantineWithPermitInput{Permit: PermitInput{Device: gpu3, Action: decide.Quarantined}, Quarantine: quarantineIn("XID 79")}
	for _, tc := range []struct {
		name     string
		breaker  *breakerAnswer
		wantRule bool
		wantErr  string
	}{
		{name: "granted", breaker: &breakerAnswer{res: breaker.PermitResult{Granted: true}}, wantRule: true},
		{name: "denied", breaker: &breakerAnswer{res: breaker.PermitResult{Reason: "circuit breaker open"}}},
		{name: "unreachable", breaker: &breakerAnswer{err: errors.New("connection refused")}, wantErr: ErrPermitUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, a, kube := activityEnv(t, slice("node-1", 3))
			a.Breaker, a.BreakerConfig = tc.breaker, breaker.Config{Window: time.Minute, MaxCount: 4}
			v, err := env.ExecuteActivity(a.QuarantineWithPermit, in)
			var app *temporal.ApplicationError
			if tc.wantErr != "" {
				if !errors.As(err, &app) || app.Type() != tc.wantErr {
					t.Fatalf("err %v, want type %s", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var res QuarantineWithPermitResult
			if err == nil {
				if err := v.Get(&res); err != nil {
					t.Fatal(err)
				}
			}
			_, getErr := kube.ResourceV1().DeviceTaintRules().Get(context.Background(), gpu3.TaintRuleName(), metav1.GetOptions{})
			if tc.wantRule != (getErr == nil) || (!tc.wantRule && !apierrors.IsNotFound(getErr)) {
				t.Fatalf("rule there: %v (%v), want %v", getErr == nil, getErr, tc.wantRule)
			}
			if res.Permit.Granted != tc.wantRule || (tc.wantRule && (!res.Rule.Created || res.Rule.RuleName != gpu3.TaintRuleName())) {
				t.Fatalf("result %+v", res)
			}
		})
	}
}
