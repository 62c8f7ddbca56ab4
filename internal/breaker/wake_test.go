package breaker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

func TestBreakerWakesTheBudgetPlusOne(t *testing.T) {
	b := &State{WakeWaiting: true, Config: Config{Window: time.Minute, MaxCount: 2}}
	b.AddWaiting([]string{"d/p/a", "d/p/b", "d/p/a", "d/p/c", "d/p/d"})
	if len(b.Waiting) != 4 {
		t.Fatalf("waiting %v: a device waits once", b.Waiting)
	}
	b.Open = true
	if w := b.Wake(); w != nil {
		t.Fatalf("an open breaker woke %v", w)
	}
	b.Open, b.RestrictionsOpen = false, true
	if w := b.Wake(); w != nil {
		t.Fatalf("a breaker with restrictions open woke %v", w)
	}
	b.RestrictionsOpen = false
	if w := b.Wake(); fmt.Sprint(w) != "[d/p/a d/p/b d/p/c]" || fmt.Sprint(b.Waiting) != "[d/p/d]" {
		t.Fatalf("woke %v, still waiting %v", w, b.Waiting)
	}
	b.AddWaiting([]string{"d/p/a"}) // woken devices may wait again
	if w := b.Wake(); fmt.Sprint(w) != "[d/p/d d/p/a]" || len(b.Waiting) != 0 {
		t.Fatalf("woke %v, still waiting %v", w, b.Waiting)
	}
	if w := b.Wake(); w != nil {
		t.Fatalf("nobody waiting, woke %v", w)
	}
}

func TestBreakerPausedByHand(t *testing.T) {
	b := &State{Config: DefaultConfig()}
	now := time.Unix(1700000000, 0)
	b.Trip("alice", "maintenance", now)
	if !b.Open || !b.OpenedAt.Equal(now) || b.Reason != "paused by alice: maintenance" {
		t.Fatalf("%+v", b)
	}
	res := b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "g"}, Action: decide.Quarantined}, now)
	if res.Granted || !strings.Contains(res.Reason, "paused by alice") {
		t.Fatalf("permit while paused: %+v", res)
	}
}
