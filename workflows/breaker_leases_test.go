package workflows

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// A pause takes back every worker's leased permits before it answers: the worker it reaches
// gives back what it did not spend and reports what it did; for the one it cannot reach, the
// answer waits until that worker's lease can no longer be spent, and the lease still counts.
func TestBreakerPauseRevokesLeases(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(nil).Maybe()
	start := env.Now()
	var mu sync.Mutex // one revocation per worker queue, at once
	var revoked []string
	env.OnActivity("RevokePermits", mock.Anything, mock.Anything).Return(func(ctx context.Context, in remediation.RevokeInput) ([]breaker.LeaseReport, error) {
		q := activity.GetInfo(ctx).TaskQueue
		mu.Lock()
		revoked = append(revoked, q)
		mu.Unlock()
		if q == "q-w2" {
			return nil, errors.New("worker gone")
		}
		return []breaker.LeaseReport{{Worker: "w1", Lease: in.Leases[0], Spent: []breaker.Grant{{Device: "d/p/gpu-9", At: env.Now()}}, Returned: 7}}, nil
	})
	cfg := breaker.Config{Window: 10 * time.Minute, MaxCount: 40}
	lease := func(worker, dev string) {
		req := breaker.LeaseRequest{PermitRequest: breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: dev}, Action: decide.Quarantined, Config: cfg},
			Worker: worker, Queue: "q-" + worker, Want: breaker.LeaseBatch}
		env.UpdateWorkflow(api.UpdateLease, worker+dev, &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) { t.Error(err) },
			OnComplete: func(v any, err error) {
				if r, _ := v.(breaker.LeaseResult); err != nil || r.Lease == nil || r.Lease.Count != 8 {
					t.Errorf("lease for %s: %+v %v", worker, v, err)
				}
			}}, req)
	}
	var answered time.Time
	var paused breaker.State
	env.RegisterDelayedCallback(func() { lease("w1", "gpu-0"); lease("w2", "gpu-1") }, time.Second)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(api.UpdateBreakerPause, "pause", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) { t.Error(err) },
			OnComplete: func(v any, err error) {
				answered, paused = env.Now(), v.(breaker.State)
				if err != nil {
					t.Error(err)
				}
			}}, api.BreakerSignal{Actor: "sre", Reason: "test"})
	}, 3*time.Second)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, time.Minute)
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{})

	sort.Strings(revoked)
	if len(revoked) != 2 || revoked[0] != "q-w1" || revoked[1] != "q-w2" {
		t.Fatalf("revoked on %v", revoked)
	}
	if want := start.Add(time.Second + breaker.LeaseFor); answered.Before(want) {
		t.Fatalf("pause answered at +%s, before the unreachable worker's lease ran out (+%s)", answered.Sub(start), want.Sub(start))
	}
	if !paused.Open || len(paused.Leases) != 1 || paused.Leases[0].Worker != "w2" || !paused.Leases[0].Unreachable || paused.Leases[0].Count != 8 {
		t.Fatalf("leases after the pause: %+v", paused.Leases)
	}
	if len(paused.Grants) != 3 || paused.Grants[2].Device != "d/p/gpu-9" {
		t.Fatalf("grants after the pause: %+v", paused.Grants)
	}
}

// Workers report spent and returned permits by signal; the breaker's state shows each device.
func TestBreakerTakesLeaseReports(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	registerActivities(env)
	cfg := breaker.Config{Window: 10 * time.Minute, MaxCount: 40}
	env.RegisterDelayedCallback(func() {
		req := breaker.LeaseRequest{PermitRequest: breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}, Action: decide.Quarantined, Config: cfg},
			Worker: "w1", Queue: "q-w1", Want: 4}
		env.UpdateWorkflow(api.UpdateLease, "l", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(err error) { t.Error(err) }, OnComplete: func(any, error) {}}, req)
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(api.SignalPermitsReport, []breaker.LeaseReport{{Worker: "w1", Lease: 1, Spent: []breaker.Grant{{Device: "d/p/gpu-3", At: env.Now()}}, Returned: 1}})
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(api.QueryState)
		if err != nil {
			t.Fatal(err)
		}
		var st breaker.State
		if err := v.Get(&st); err != nil {
			t.Fatal(err)
		}
		if len(st.Grants) != 2 || st.Grants[1].Device != "d/p/gpu-3" || len(st.Leases) != 1 || st.Leases[0].Count != 2 {
			t.Errorf("state after the report: grants %+v leases %+v", st.Grants, st.Leases)
		}
		env.CancelWorkflow()
	}, 3*time.Second)
	env.ExecuteWorkflow(BreakerWorkflow, api.BreakerInput{})
}
