package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Tests written against mutants that lived (gremlins): each pins a boundary or a branch.

func TestBreakerWaitListIsCapped(t *testing.T) {
	b := &BreakerState{WakeWaiting: true}
	devs := make([]string, maxWaiting+1)
	for i := range devs {
		devs[i] = fmt.Sprint("d/p/gpu-", i)
	}
	b.AddWaiting(devs)
	if len(b.Waiting) != maxWaiting {
		t.Fatalf("%d waiting, cap %d", len(b.Waiting), maxWaiting)
	}
	old := &BreakerState{}
	old.AddWaiting(devs[:3])
	if len(old.Waiting) != 0 {
		t.Fatal("a breaker run from before the wait list kept one")
	}
}

func TestBreakerLimitWithoutAFleetSize(t *testing.T) {
	c := BreakerConfig{Window: time.Minute, MaxCount: 20, MaxPercent: 10}
	if c.Limit(0) != 20 || c.Limit(1000) != 20 || c.Limit(50) != 5 || c.Limit(5) != 1 {
		t.Fatalf("limits %d %d %d %d", c.Limit(0), c.Limit(1000), c.Limit(50), c.Limit(5))
	}
	if (BreakerConfig{Window: time.Minute, MaxCount: 20}).Limit(5) != 20 {
		t.Fatal("no percentage: the count alone")
	}
}

func TestBreakerConfigOwnerAndFleetSize(t *testing.T) {
	owned := BreakerConfig{Window: time.Hour, MaxCount: 3, MaxPercent: 100}
	other := BreakerConfig{Window: time.Minute, MaxCount: 50, MaxPercent: 100}
	req := func(n int, c BreakerConfig, known int) PermitRequest {
		return PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", n)}, Action: Quarantined, KnownDevices: known, Config: c}
	}
	b := &BreakerState{WakeWaiting: true, Config: DefaultBreaker()}
	b.Acquire(req(0, other, 100), t0)
	if b.Config != other || b.Known != 100 {
		t.Fatalf("unconfigured breaker: config %+v known %d", b.Config, b.Known)
	}
	b.Acquire(req(1, BreakerConfig{}, 0), t0)
	if b.Config != other || b.Known != 100 {
		t.Fatalf("a request without config or fleet size changed them: %+v %d", b.Config, b.Known)
	}
	if err := b.Configure(owned, "worker-a"); err != nil {
		t.Fatal(err)
	}
	b.Acquire(req(2, other, 100), t0)
	if b.Config != owned {
		t.Fatalf("a request overrode the owner's config: %+v", b.Config)
	}
	if err := b.Configure(BreakerConfig{}, "x"); err == nil || b.ConfiguredBy != "worker-a" {
		t.Fatalf("invalid config taken: %v by %q", err, b.ConfiguredBy)
	}
	// Restrictions: the cap trips once (one denial), then every refusal counts and waits.
	b = &BreakerState{WakeWaiting: true, SeparateBudgets: true}
	c := BreakerConfig{Window: time.Hour, MaxCount: 1, MaxPercent: 100}
	r := func(n int) PermitRequest { x := req(n, c, 100); x.Action = Restricted; return x }
	b.Acquire(r(0), t0)
	if res := b.Acquire(r(1), t0); !res.Tripped || b.Denied != 1 {
		t.Fatalf("trip: %+v denied %d", res, b.Denied)
	}
	if res := b.Acquire(r(2), t0); res.Granted || res.Tripped || b.Denied != 2 || len(b.Waiting) != 2 {
		t.Fatalf("held: %+v denied %d waiting %v", res, b.Denied, b.Waiting)
	}
}

func TestHeldQuarantineIsNotAskedTwice(t *testing.T) {
	st := NewState(dev, "node-1", Default(), false)
	acts := st.Observe(obs(device.Unhealthy, 1, ""), t0)
	for _, a := range acts {
		if a.Kind == ActTaint {
			st.Denied(a, "circuit breaker open", t0)
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
	st = NewState(dev, "node-1", Default(), false)
	st.Observe(obs(device.Unknown, 1, ""), t0)
	for _, a := range st.Tick(st.ToleranceUntil) {
		if a.Kind == ActTaint {
			st.Denied(a, "restrictions held", st.ToleranceUntil)
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
	st := NewState(dev, "node-1", Default(), false)
	st.StaleGraceOn = true
	st.Observe(obs(device.Healthy, 1, SourcePodStatus), t0)
	if st.Tick(t0.Add(st.Policy.HeartbeatLimit.D() + StaleLate)); !st.Stale {
		t.Fatal("a deadline exactly StaleLate late is not late")
	}
}

func TestTransitionsKeepTheNewestHundred(t *testing.T) {
	st := NewState(dev, "node-1", Default(), false)
	for i := 0; i < maxTransitions+5; i++ {
		st.transition(Suspect, fmt.Sprint("t", i), Actor, t0)
	}
	if len(st.Transitions) != maxTransitions || st.Transitions[maxTransitions-1].Reason != fmt.Sprint("t", maxTransitions+4) {
		t.Fatalf("%d transitions kept, last %q", len(st.Transitions), st.Transitions[len(st.Transitions)-1].Reason)
	}
}

func TestBreakerConfigBounds(t *testing.T) {
	if d := DefaultBreaker(); d.Window != 10*time.Minute || d.MaxCount != 20 || d.MaxPercent != 10 {
		t.Fatalf("default breaker %+v", d)
	}
	ok := []BreakerConfig{{Window: time.Nanosecond, MaxCount: 1}, {Window: time.Minute, MaxCount: 1, MaxPercent: 100}}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v refused: %v", c, err)
		}
	}
	bad := []BreakerConfig{{MaxCount: 1}, {Window: time.Minute}, {Window: time.Minute, MaxCount: 1, MaxPercent: -0.5},
		{Window: time.Minute, MaxCount: 1, MaxPercent: 100.5}}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
