package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// sharedPlan is a one-phase rollout that makes its class shared, with an enforcement proof whose
// failure does what onUnenforced says.
func sharedPlan(onUnenforced string) rolloutplan.Plan {
	p := testPlan()
	p.Phases = p.Phases[1:]
	p.Phases[0].Classes[0].Shared = true
	p.Phases[0].Enforcement = &rolloutplan.Enforcement{Image: "load:1", Share: "8Gi", Capacity: "memory", Tenants: 3, Noisy: 4, Tolerance: 0.1,
		Namespace: "proof", Duration: policy.JSONDuration(time.Minute), StartDelay: policy.JSONDuration(10 * time.Second),
		Timeout: policy.JSONDuration(10 * time.Minute), OnUnenforced: onUnenforced}
	return p
}

// proofReport is a judged report with a noisy tenant that got its share (enforced) or 3.3 times it.
func proofReport(enforced bool) rolloutplan.ProofReport {
	noisy := 200.0
	if !enforced {
		noisy = 667
	}
	r := rolloutplan.ProofReport{Phase: "wide", Class: "gpu-b", Node: "wide-0", Device: "wide-0/gpu-0", Tolerance: 0.1,
		Baseline: rolloutplan.LoadResult{Throughput: 1000, P99Ms: 10},
		Tenants: []rolloutplan.TenantFigures{{Pod: "t0", ShareID: "a", Role: rolloutplan.RoleTenant, Fraction: 0.2, Expected: 200, Result: rolloutplan.LoadResult{Throughput: 200, P99Ms: 10}},
			{Pod: "n", ShareID: "b", Role: rolloutplan.RoleNoisy, Fraction: 0.2, Expected: 200, Result: rolloutplan.LoadResult{Throughput: noisy, P99Ms: 10}}}}
	r.Judge()
	return r
}

// proofEnv is a rollout env whose proofs answer with the outcomes in turn ("pass", "fail", or an
// error's text), recording blocks with their exception and class marks.
func proofEnv(t *testing.T, outcomes ...string) *rolloutEnv {
	r := newRolloutEnv(t)
	r.preflight(func(int) []rolloutplan.Violation { return nil })
	r.enable()
	r.gates(func(int, int) []string { return nil })
	r.rollbackActs()
	n := 0
	r.env.OnActivity(rol.ProveEnforcement, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.PhaseInput) ([]rolloutplan.ProofReport, error) {
		o := outcomes[min(n, len(outcomes)-1)]
		n++
		r.record("prove", o)
		switch o {
		case "pass":
			return []rolloutplan.ProofReport{proofReport(true)}, nil
		case "fail":
			return []rolloutplan.ProofReport{proofReport(false)}, nil
		}
		return nil, errors.New(o)
	}).Maybe()
	r.env.OnActivity(rol.MarkClassIsolation, mock.Anything, mock.Anything).Return(func(_ context.Context, in rollouts.IsolationInput) error {
		mark := "proven"
		if in.Soft {
			mark = "soft"
			if !strings.Contains(in.Note, "soft quota, no QoS") || !strings.Contains(in.Note, "approved by ops") {
				t.Errorf("soft-quota note = %q", in.Note)
			}
		}
		r.record("mark", strings.Join(in.Classes, ",")+"="+mark)
		return nil
	}).Maybe()
	return r
}

// TestProvenPhaseOpensToTenants: tenants' claims are refused (the proof's namespace excepted)
// before the nodes switch, the proof runs, and only a passing proof lifts the block and starts
// the soak.
func TestProvenPhaseOpensToTenants(t *testing.T) {
	r := proofEnv(t, "pass")
	st := r.run(api.RolloutInput{Plan: sharedPlan(rolloutplan.UnenforcedWholeDevice)})
	r.wantCalls("preflight:wide", "block:wide but proof", "enable:wide", "prove:pass", "mark:gpu-b=proven", "unblock:wide", "gates:wide")
	if st.State != rolloutplan.StateCompleted || len(st.Proofs) != 1 || !st.Proofs[0].Enforced || len(st.Blocks) != 0 {
		t.Errorf("state %s proofs %d blocks %v", st.State, len(st.Proofs), st.Blocks)
	}
	if countLog(st, "open to tenants (enforcement proven on 1 device(s))") != 1 {
		t.Errorf("log: %v", st.Log)
	}
	if countLog(st, "phase wide: proving enforcement (3 tenants of 8Gi memory") != 1 || countLog(st, "phase wide proof: enforced on wide-0") != 1 {
		t.Errorf("log: %v", st.Log)
	}
}

// TestUnprovenPhaseStaysWholeDevice: a failed proof with onUnenforced whole-device rolls the phase
// back to the plugin with the report's reason; its tenants never get the shared class.
func TestUnprovenPhaseStaysWholeDevice(t *testing.T) {
	r := proofEnv(t, "fail")
	p := sharedPlan(rolloutplan.UnenforcedWholeDevice)
	p.RollbackHold = policy.JSONDuration(time.Hour)
	st := r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:wide", "block:wide but proof", "enable:wide", "prove:fail", "block:wide=gpu-b", "undo:wide=plugin")
	if st.State != rolloutplan.StateRolledBack || len(st.Blocks) != 1 || st.Blocks[0].Except != "" {
		t.Fatalf("state %s blocks %+v", st.State, st.Blocks)
	}
	if !strings.Contains(st.Blocks[0].Reason, "enforcement not proven") || !strings.Contains(st.Blocks[0].Reason, "noisy tenant n (ShareID b) got 667/s, 3.33x its share") ||
		!strings.Contains(st.Blocks[0].Reason, "stays whole-device") {
		t.Errorf("reason = %q", st.Blocks[0].Reason)
	}
}

// TestUnprovenPhaseWaitsForAPerson: with onUnenforced approve, a failed proof waits; an approval
// records who let tenants in, labels the class soft quota, and opens it.
func TestUnprovenPhaseWaitsForAPerson(t *testing.T) {
	r := proofEnv(t, "fail")
	waiting := r.stateAt(time.Hour)
	r.update(time.Hour+time.Second, api.UpdateRolloutApprove, rolloutplan.Command{Actor: "ops", Phase: "canary"}, false)
	r.update(2*time.Hour, api.UpdateRolloutApprove, rolloutplan.Command{Actor: "ops", Phase: "wide", Reason: "inference only"}, true)
	st := r.run(api.RolloutInput{Plan: sharedPlan(rolloutplan.UnenforcedApprove)})
	if waiting.State != rolloutplan.StateWaitingApproval || waiting.Awaiting != "wide" || waiting.Unproven != "wide" || waiting.Step != rolloutplan.StepProve {
		t.Errorf("while waiting: state %s awaiting %q unproven %q step %s", waiting.State, waiting.Awaiting, waiting.Unproven, waiting.Step)
	}
	r.wantCalls("preflight:wide", "block:wide but proof", "enable:wide", "prove:fail", "ask:wide>wide as soft quota, no QoS", "mark:gpu-b=soft", "unblock:wide", "gates:wide")
	if st.State != rolloutplan.StateCompleted || len(st.SoftQuotas) != 1 {
		t.Fatalf("state %s soft quotas %+v", st.State, st.SoftQuotas)
	}
	q := st.SoftQuotas[0]
	if q.Actor != "ops" || q.Phase != "wide" || q.Reason != "inference only" || len(q.Classes) != 1 || !strings.Contains(q.Proof, "noisy tenant") {
		t.Errorf("soft quota = %+v", q)
	}
}

// TestRollbackWhileWaitingForAPerson: a rollback instead of an approval leaves the class
// unlabelled and refused.
func TestRollbackWhileWaitingForAPerson(t *testing.T) {
	r := proofEnv(t, "fail")
	r.update(time.Hour, api.UpdateRolloutRollback, rolloutplan.Command{Actor: "ops", Reason: "no"}, true)
	p := sharedPlan(rolloutplan.UnenforcedApprove)
	p.RollbackHold = policy.JSONDuration(time.Hour)
	st := r.run(api.RolloutInput{Plan: p})
	r.wantCalls("preflight:wide", "block:wide but proof", "enable:wide", "prove:fail", "ask:wide>wide as soft quota, no QoS", "block:wide=gpu-b", "undo:wide=plugin")
	if st.State != rolloutplan.StateRolledBack || st.Unproven != "" || len(st.SoftQuotas) != 0 {
		t.Errorf("state %s unproven %q soft quotas %v", st.State, st.Unproven, st.SoftQuotas)
	}
}

// TestProofThatCannotFinishHoldsTenantsOut: a proof whose loads lose their results on every
// attempt holds the rollout blocked with tenants still refused; a resume proves again.
func TestProofThatCannotFinishHoldsTenantsOut(t *testing.T) {
	r := proofEnv(t, "load Pod x ended with no result", "load Pod x ended with no result", "load Pod x ended with no result", "pass")
	blocked := r.stateAt(30 * time.Minute)
	r.update(time.Hour, api.UpdateRolloutResume, rolloutplan.Command{Actor: "ops"}, true)
	st := r.run(api.RolloutInput{Plan: sharedPlan(rolloutplan.UnenforcedWholeDevice)})
	if blocked.State != rolloutplan.StateBlocked || len(blocked.Blocks) != 1 || blocked.Blocks[0].Except != "proof" {
		t.Errorf("after the failed proof: state %s blocks %+v", blocked.State, blocked.Blocks)
	}
	r.wantCalls("preflight:wide", "block:wide but proof", "enable:wide", "prove:load Pod x ended with no result", "prove:load Pod x ended with no result",
		"prove:load Pod x ended with no result", "prove:pass", "mark:gpu-b=proven", "unblock:wide", "gates:wide")
	if st.State != rolloutplan.StateCompleted {
		t.Errorf("state %s", st.State)
	}
}
