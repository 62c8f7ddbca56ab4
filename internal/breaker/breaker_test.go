package breaker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

func req(i int, known int, cfg Config) PermitRequest {
	return PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Action: decide.Quarantined, KnownDevices: known, Config: cfg}
}

func TestBreakerCapsAndHoldsUntilResume(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 5, MaxPercent: 100}
	var b State
	granted, tripped := 0, 0
	for i := 0; i < 20; i++ {
		r := b.Acquire(req(i, 100, cfg), t0)
		if r.Granted {
			granted++
		}
		if r.Tripped {
			tripped++
		}
	}
	if granted != 5 || tripped != 1 || !b.Open || b.Denied != 15 {
		t.Fatalf("granted %d tripped %d open %v denied %d", granted, tripped, b.Open, b.Denied)
	}
	// A device already granted is not counted twice (an activity retry).
	if r := b.Acquire(req(0, 100, cfg), t0.Add(time.Minute)); !r.Granted {
		t.Fatal("retry of a granted request was denied")
	}
	// The window passing does not close it: only an operator does.
	if r := b.Acquire(req(30, 100, cfg), t0.Add(time.Hour)); r.Granted {
		t.Fatal("breaker closed by itself")
	}
	b.Resume("alice", t0.Add(2*time.Hour))
	if r := b.Acquire(req(40, 100, cfg), t0.Add(2*time.Hour)); !r.Granted || b.Open {
		t.Fatalf("after resume: %+v", r)
	}
}

func TestBreakerSlidingWindowAndPercent(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 100, MaxPercent: 10}
	if got := cfg.Limit(40); got != 4 {
		t.Fatalf("limit(40) = %d, want 4 (10%%)", got)
	}
	if got := cfg.Limit(3); got != 1 {
		t.Fatalf("limit(3) = %d, want at least 1", got)
	}
	var b State
	for i := 0; i < 4; i++ {
		if r := b.Acquire(req(i, 40, cfg), t0.Add(time.Duration(i)*time.Minute)); !r.Granted {
			t.Fatalf("grant %d denied", i)
		}
	}
	// 10m30s after the first grant only that one has left the window: exactly one more fits.
	if r := b.Acquire(req(10, 40, cfg), t0.Add(10*time.Minute+30*time.Second)); !r.Granted {
		t.Fatalf("sliding window did not slide: %+v", r)
	}
	if r := b.Acquire(req(11, 40, cfg), t0.Add(10*time.Minute+30*time.Second)); r.Granted || !b.Open {
		t.Fatal("cap not enforced")
	}
}

func TestRestrictionsHaveTheirOwnBudget(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 3}
	b := &State{SeparateBudgets: true}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	ask := func(i int, action decide.State) PermitResult {
		return b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Action: action, KnownDevices: 1000, Config: cfg}, at(i))
	}
	for i := 0; i < 3; i++ {
		if r := ask(i, decide.Restricted); !r.Granted {
			t.Fatalf("restriction %d denied: %s", i, r.Reason)
		}
	}
	r := ask(3, decide.Restricted)
	if r.Granted || !r.Tripped || !b.RestrictionsOpen || b.Open || !strings.Contains(r.Reason, "restrictions") {
		t.Fatalf("4th restriction: %+v, breaker %+v", r, b)
	}
	if r := ask(4, decide.Restricted); r.Granted || r.Tripped {
		t.Fatalf("5th restriction: %+v", r)
	}
	for i := 10; i < 13; i++ {
		if r := ask(i, decide.Quarantined); !r.Granted {
			t.Fatalf("quarantine %d denied by the restriction storm: %s", i, r.Reason)
		}
	}
	if r := ask(13, decide.Quarantined); r.Granted || !b.Open {
		t.Fatalf("quarantine past its own cap: %+v", r)
	}
	b.Resume("alice", at(20))
	if b.Open || b.RestrictionsOpen {
		t.Fatal("resume left a budget closed")
	}
	// Without separate budgets (runs recorded before), restrictions count against the one cap.
	old := &State{}
	for i := 0; i < 3; i++ {
		old.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Action: decide.Restricted, Config: cfg}, at(i))
	}
	if r := old.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-9"}, Action: decide.Quarantined, Config: cfg}, at(5)); r.Granted {
		t.Fatal("old runs changed behaviour")
	}
}

func TestBreakerConfigJSON(t *testing.T) {
	b, err := json.Marshal(Config{Window: 10 * time.Minute, MaxCount: 20, MaxPercent: 10})
	if err != nil || string(b) != `{"maxCount":20,"maxPercent":10,"window":"10m0s"}` {
		t.Fatalf("%s %v", b, err)
	}
	for _, in := range []string{`{"window":"10m","maxCount":20,"maxPercent":10}`, `{"window":600000000000,"maxCount":20,"maxPercent":10}`} {
		var c Config
		if err := json.Unmarshal([]byte(in), &c); err != nil || c.Window != 10*time.Minute || c.MaxCount != 20 || c.MaxPercent != 10 {
			t.Errorf("%s -> %+v %v", in, c, err)
		}
	}
	var c Config
	if err := json.Unmarshal([]byte(`{"window":[1]}`), &c); err == nil {
		t.Error("a window that is not a duration decoded")
	}
}

func TestClaimDeletionsShareTheActionsBudget(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 2}
	b := State{WakeWaiting: true, SeparateBudgets: true, Config: cfg}
	claim := func(uid string) PermitRequest {
		return PermitRequest{Claim: "t/c-" + uid + "/" + uid, Action: ClaimDeleted, Config: cfg}
	}
	if r := b.Acquire(req(0, 0, cfg), t0); !r.Granted {
		t.Fatalf("quarantine: %+v", r)
	}
	if r := b.Acquire(claim("a"), t0); !r.Granted {
		t.Fatalf("first claim: %+v", r)
	}
	if r := b.Acquire(claim("a"), t0); !r.Granted || r.Reason == "" {
		t.Fatalf("a retried deletion of one claim is granted again without counting: %+v", r)
	}
	if len(b.Grants) != 2 || b.Grants[1].Device != "claim:t/c-a/a" || b.Grants[1].Action != ClaimDeleted {
		t.Fatalf("grants = %+v", b.Grants)
	}
	if r := b.Acquire(claim("b"), t0); r.Granted || !r.Tripped || !b.Open {
		t.Fatalf("the third action in the window must open the breaker: %+v", r)
	}
	if r := b.Acquire(claim("c"), t0); r.Granted {
		t.Fatalf("open breaker granted a claim: %+v", r)
	}
	if len(b.Waiting) != 0 {
		t.Fatalf("claims on the wait list: %v", b.Waiting)
	}
	if r := b.Acquire(req(1, 0, cfg), t0); r.Granted || len(b.Waiting) != 1 {
		t.Fatalf("a denied device waits: %+v %v", r, b.Waiting)
	}
}

func TestOpenBreakerDeniesARepeatOfAGrantedAction(t *testing.T) {
	for _, deniesAll := range []bool{false, true} {
		b := &State{Config: Config{Window: 10 * time.Minute, MaxCount: 5}, OpenDeniesAll: deniesAll}
		req := PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}, Action: decide.Quarantined, Config: b.Config}
		now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		if !b.Acquire(req, now).Granted {
			t.Fatal("first request denied")
		}
		b.Trip("ops", "storm", now.Add(time.Minute))
		if got := b.Acquire(req, now.Add(2*time.Minute)).Granted; got == deniesAll {
			t.Fatalf("OpenDeniesAll %v: the repeat while paused granted %v", deniesAll, got)
		}
	}
}
