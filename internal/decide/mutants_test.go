package decide

import (
	"fmt"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func TestHeldQuarantineIsNotAskedTwice(t *testing.T) {
	st := NewState(dev, "node-1", policy.Default(), false)
	acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
	for _, a := range acts {
		if a.Kind == ActTaint {
			fenceOf(st).denied(a, "circuit breaker open", t0)
		}
	}
	if acts := st.Observe(obs(device.Unhealthy, 2, ""), t0.Add(time.Second)); len(acts) != 0 {
		t.Fatalf("a second Unhealthy report for a held quarantine acted: %v", kinds(acts))
	}
	if next := st.NextDeadline(); !next.Equal(st.RetryAt) || next.IsZero() {
		t.Fatalf("next deadline %s, want the held action's retry %s", next, st.RetryAt)
	}
	// Healthy does not drop a held quarantine; it does drop a held restriction.
	st.Observe(obs(device.Healthy, 3, ""), t0.Add(2*time.Second))
	if st.Held == nil {
		t.Fatal("Healthy dropped a held quarantine")
	}
	st = NewState(dev, "node-1", policy.Default(), false)
	st.Observe(obs(device.Unknown, 1, ""), t0)
	for _, a := range st.Tick(st.ToleranceUntil) {
		if a.Kind == ActTaint {
			fenceOf(st).denied(a, "restrictions held", st.ToleranceUntil)
		}
	}
	if st.Held == nil || st.Held.To != Restricted {
		t.Fatalf("held %+v", st.Held)
	}
	st.Observe(obs(device.Healthy, 2, ""), st.ToleranceUntil.Add(time.Second))
	if st.Held != nil {
		t.Fatal("Healthy kept a held restriction")
	}
}

func TestStaleGraceBoundary(t *testing.T) {
	st := NewState(dev, "node-1", policy.Default(), false)
	st.rules.StaleGraceOn = true
	st.Observe(obs(device.Healthy, 1, SourcePodStatus), t0)
	if st.Tick(t0.Add(st.Policy.HeartbeatLimit.D() + StaleLate)); !st.Stale {
		t.Fatal("a deadline exactly StaleLate late is not late")
	}
}

func TestTransitionsKeepTheNewestHundred(t *testing.T) {
	st := NewState(dev, "node-1", policy.Default(), false)
	for i := 0; i < maxTransitions+5; i++ {
		st.transition(Suspect, fmt.Sprint("t", i), Actor, t0)
	}
	if len(st.Transitions) != maxTransitions || st.Transitions[maxTransitions-1].Reason != fmt.Sprint("t", maxTransitions+4) {
		t.Fatalf("%d transitions kept, last %q", len(st.Transitions), st.Transitions[len(st.Transitions)-1].Reason)
	}
}

// A quarantine whose rule went while the device reports Healthy is released, with an alert.
func TestRuleGoneWhileHealthyIsAReleaseWithAnAlert(t *testing.T) {
	st := quarantined(policy.Default())
	st.Observe(obs(device.Healthy, 2, SourcePodStatus), t0.Add(time.Minute))
	if st.State != Quarantined || st.Health != device.Healthy {
		t.Fatalf("setup: %s %s", st.State, st.Health)
	}
	acts := fenceOf(st).ruleSeen(RuleInfo{Name: dev.TaintRuleName()}, t0.Add(2*time.Minute))
	if st.State != Released || len(acts) != 1 || acts[0].Kind != ActAlert {
		t.Fatalf("after the rule went: %s %v", st.State, acts)
	}
}
