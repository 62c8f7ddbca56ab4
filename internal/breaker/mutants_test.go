package breaker

import (
	"fmt"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

func TestBreakerWaitListIsCapped(t *testing.T) {
	b := &State{WakeWaiting: true}
	devs := make([]string, maxWaiting+1)
	for i := range devs {
		devs[i] = fmt.Sprint("d/p/gpu-", i)
	}
	b.AddWaiting(devs)
	if len(b.Waiting) != maxWaiting {
		t.Fatalf("%d waiting, cap %d", len(b.Waiting), maxWaiting)
	}
	old := &State{}
	old.AddWaiting(devs[:3])
	if len(old.Waiting) != 0 {
		t.Fatal("a breaker run from before the wait list kept one")
	}
}

func TestBreakerLimitWithoutAFleetSize(t *testing.T) {
	c := Config{Window: time.Minute, MaxCount: 20, MaxPercent: 10}
	if c.Limit(0) != 20 || c.Limit(1000) != 20 || c.Limit(50) != 5 || c.Limit(5) != 1 {
		t.Fatalf("limits %d %d %d %d", c.Limit(0), c.Limit(1000), c.Limit(50), c.Limit(5))
	}
	if (Config{Window: time.Minute, MaxCount: 20}).Limit(5) != 20 {
		t.Fatal("no percentage: the count alone")
	}
}

func TestBreakerConfigOwnerAndFleetSize(t *testing.T) {
	owned := Config{Window: time.Hour, MaxCount: 3, MaxPercent: 100}
	other := Config{Window: time.Minute, MaxCount: 50, MaxPercent: 100}
	req := func(n int, c Config, known int) PermitRequest {
		return PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", n)}, Action: decide.Quarantined, KnownDevices: known, Config: c}
	}
	b := &State{WakeWaiting: true, Config: DefaultConfig()}
	b.Acquire(req(0, other, 100), t0)
	if b.Config != other || b.Known != 100 {
		t.Fatalf("unconfigured breaker: config %+v known %d", b.Config, b.Known)
	}
	b.Acquire(req(1, Config{}, 0), t0)
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
	if err := b.Configure(Config{}, "x"); err == nil || b.ConfiguredBy != "worker-a" {
		t.Fatalf("invalid config taken: %v by %q", err, b.ConfiguredBy)
	}
	// Restrictions: the cap trips once (one denial), then every refusal counts and waits.
	b = &State{WakeWaiting: true, SeparateBudgets: true}
	c := Config{Window: time.Hour, MaxCount: 1, MaxPercent: 100}
	r := func(n int) PermitRequest { x := req(n, c, 100); x.Action = decide.Restricted; return x }
	b.Acquire(r(0), t0)
	if res := b.Acquire(r(1), t0); !res.Tripped || b.Denied != 1 {
		t.Fatalf("trip: %+v denied %d", res, b.Denied)
	}
	if res := b.Acquire(r(2), t0); res.Granted || res.Tripped || b.Denied != 2 || len(b.Waiting) != 2 {
		t.Fatalf("held: %+v denied %d waiting %v", res, b.Denied, b.Waiting)
	}
}

func TestBreakerConfigBounds(t *testing.T) {
	if d := DefaultConfig(); d.Window != 10*time.Minute || d.MaxCount != 20 || d.MaxPercent != 10 {
		t.Fatalf("default breaker %+v", d)
	}
	ok := []Config{{Window: time.Nanosecond, MaxCount: 1}, {Window: time.Minute, MaxCount: 1, MaxPercent: 100}}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v refused: %v", c, err)
		}
	}
	bad := []Config{{MaxCount: 1}, {Window: time.Minute}, {Window: time.Minute, MaxCount: 1, MaxPercent: -0.5},
		{Window: time.Minute, MaxCount: 1, MaxPercent: 100.5}}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
