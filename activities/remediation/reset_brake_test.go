package remediation

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A reset whose Pod never started is no verdict on the device: its permit is given back without
// a failure, so the brake does not count it; a reset that ran and failed is counted.
func TestAResetThatNeverRanIsNoFailure(t *testing.T) {
	for _, tc := range []struct {
		phase         corev1.PodPhase
		notRun, fails bool
		reason        string
	}{
		{corev1.PodPending, true, false, "repair Pod did not start within 1s (phase Pending"},
		{corev1.PodFailed, false, true, "exit code 1 Error ECC error"},
	} {
		t.Run(string(tc.phase), func(t *testing.T) {
			env, a, kube := activityEnv(t, gpuSlice())
			r := &releases{}
			a.CheckPoll, a.Breaker = 50*time.Millisecond, r
			stop := kubelet(kube, tc.phase, corev1.ResourceHealthStatusUnhealthy)
			defer stop()
			in := checkIn(decide.ActRepair)
			in.Check.Timeout = policy.JSONDuration(time.Second)
			in.Step, in.Permit, in.Attempts, in.TryAt = string(policy.RepairReset), gpu3, 3, time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
			v, err := env.ExecuteActivity(a.RunCheck, in)
			var res decide.StepResult
			if err == nil {
				err = v.Get(&res)
			}
			if err != nil || res.Passed || res.NotRun != tc.notRun || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("result %+v %v", res, err)
			}
			key := breaker.PermitRequest{Device: gpu3, Action: breaker.Reset}.Key()
			if len(r.rels) != 1 || r.rels[0].Key != key || r.rels[0].Failed != tc.fails {
				t.Fatalf("permit given back %+v, want failed %v", r.rels, tc.fails)
			}
		})
	}
}

// A reset's permit is asked for with the hold the workflow gives, as a node step's is.
func TestAResetPermitCarriesItsHold(t *testing.T) {
	_, a, _ := activityEnv(t, gpuSlice())
	r := &releases{}
	a.Breaker = r
	if _, err := a.AcquirePermit(context.Background(), PermitInput{Device: gpu3, Action: breaker.Reset, Hold: 40 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if len(r.reqs) != 1 || r.reqs[0].Hold != 40*time.Minute || r.reqs[0].Action != breaker.Reset {
		t.Fatalf("requests %+v", r.reqs)
	}
}
