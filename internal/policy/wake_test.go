package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

func TestBreakerWakesTheBudgetPlusOne(t *testing.T) {
	b := &BreakerState{WakeWaiting: true, Config: BreakerConfig{Window: time.Minute, MaxCount: 2}}
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
	b := &BreakerState{Config: DefaultBreaker()}
	now := time.Unix(1700000000, 0)
	b.Trip("alice", "maintenance", now)
	if !b.Open || !b.OpenedAt.Equal(now) || b.Reason != "paused by alice: maintenance" {
		t.Fatalf("%+v", b)
	}
	res := b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: "g"}, Action: Quarantined}, now)
	if res.Granted || !strings.Contains(res.Reason, "paused by alice") {
		t.Fatalf("permit while paused: %+v", res)
	}
}

func TestWokenRetriesTheHeldAction(t *testing.T) {
	now := time.Unix(1700000000, 0)
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", Default(), false)
	if acts := st.Woken(now); acts != nil {
		t.Fatalf("woken with nothing held: %v", acts)
	}
	st.BreakerWake = true
	act := Action{Kind: ActTaint, To: Quarantined, Automatic: true, Reason: "XID 79"}
	st.Denied(act, "circuit breaker open", now)
	if !st.RetryAt.Equal(now.Add(10 * time.Minute)) { // BreakerFallback, as documented
		t.Fatalf("retry at %v, want the 10-minute fallback", st.RetryAt)
	}
	st.Paused = true
	if acts := st.Woken(now); acts != nil {
		t.Fatalf("woken while paused: %v", acts)
	}
	st.Paused = false
	acts := st.Woken(now.Add(time.Second))
	if len(acts) != 1 || acts[0].Kind != ActTaint || !acts[0].Woken {
		t.Fatalf("woken: %+v", acts)
	}
	old := NewState(device.ID{Driver: "d", Pool: "p", Device: "h"}, "n", Default(), false)
	old.Denied(act, "circuit breaker open", now)
	if !old.RetryAt.Equal(now.Add(BreakerRetry)) {
		t.Fatalf("a run from before wake-ups retries at %v, want %v", old.RetryAt, now.Add(BreakerRetry))
	}
}

func TestTaintFailuresAlertFirstAndEveryTenth(t *testing.T) {
	now := time.Unix(1700000000, 0)
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", Default(), false)
	act := Action{Kind: ActTaint, To: Quarantined}
	var alerted []int
	for i := 1; i <= 20; i++ {
		if acts := st.TaintFailed(act, "webhook", now); len(acts) > 0 {
			if acts[0].Level != LevelCritical || !strings.Contains(acts[0].Reason, fmt.Sprintf("failed %d time(s)", i)) {
				t.Fatalf("alert %+v", acts[0])
			}
			alerted = append(alerted, i)
		}
	}
	if fmt.Sprint(alerted) != "[1 10 20]" || st.Held == nil || !strings.HasPrefix(st.HeldReason, "taint failed: webhook") {
		t.Fatalf("alerted at %v, held %q", alerted, st.HeldReason)
	}
}

func TestReleaseFailedKeepsTheFence(t *testing.T) {
	now := time.Unix(1700000000, 0)
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", Default(), false)
	if acts := st.ReleaseFailed("forbidden", now); acts != nil || len(st.Transitions) != 0 {
		t.Fatalf("no review, yet %v", acts)
	}
	st.ReleasePath = true
	st.Applied(Action{Kind: ActTaint, To: Quarantined, Reason: "XID 79", Actor: Actor}, "rule", now)
	st.Review = &Review{Stage: StageRelease, From: Quarantined}
	st.State = Recovering
	st.ReleaseFailed("forbidden", now)
	last := st.Transitions[len(st.Transitions)-1]
	if st.State != Quarantined || !strings.Contains(last.Reason, "release failed: forbidden") || st.Review != nil {
		t.Fatalf("state %s, last transition %+v, review %+v", st.State, last, st.Review)
	}
}

func TestPolicyFiles(t *testing.T) {
	if p := DefaultSet().For("any.class", "any.driver"); p.Name != "default" || p.QuarantineLease != Default().QuarantineLease {
		t.Fatalf("default set gave %+v", p)
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read policy file") {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies:\n  - name: x\n    toleranceWindow: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), "policy file "+bad) || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad file: %v", err)
	}
}
