package decide

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func TestWokenRetriesTheHeldAction(t *testing.T) {
	now := time.Unix(1700000000, 0)
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", policy.Default(), false)
	if acts := st.Woken(now); acts != nil {
		t.Fatalf("woken with nothing held: %v", acts)
	}
	st.rules.BreakerWake = true
	act := Action{Kind: ActTaint, To: Quarantined, Automatic: true, Reason: "XID 79"}
	fenceOf(st).denied(act, "circuit breaker open", now)
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
	old := NewState(device.ID{Driver: "d", Pool: "p", Device: "h"}, "n", policy.Default(), false)
	fenceOf(old).denied(act, "circuit breaker open", now)
	if !old.RetryAt.Equal(now.Add(BreakerRetry)) {
		t.Fatalf("a run from before wake-ups retries at %v, want %v", old.RetryAt, now.Add(BreakerRetry))
	}
}

func TestTaintFailuresAlertFirstAndEveryTenth(t *testing.T) {
	now := time.Unix(1700000000, 0)
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", policy.Default(), false)
	act := Action{Kind: ActTaint, To: Quarantined}
	var alerted []int
	for i := 1; i <= 20; i++ {
		if acts := fenceOf(st).taintFailed(act, "webhook", now); len(acts) > 0 {
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
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", policy.Default(), false)
	if acts := fenceOf(st).releaseFailed("forbidden", now); acts != nil || len(st.Transitions) != 0 {
		t.Fatalf("no review, yet %v", acts)
	}
	st.rules.ReleasePath = true
	fenceOf(st).applied(Action{Kind: ActTaint, To: Quarantined, Reason: "XID 79", Actor: Actor}, "rule", now)
	st.Review = &Review{Stage: StageRelease, From: Quarantined}
	st.State = Recovering
	fenceOf(st).releaseFailed("forbidden", now)
	last := st.Transitions[len(st.Transitions)-1]
	if st.State != Quarantined || !strings.Contains(last.Reason, "release failed: forbidden") || st.Review != nil {
		t.Fatalf("state %s, last transition %+v, review %+v", st.State, last, st.Review)
	}
}

// A ladder whose reset the breaker refused for its budget takes its try when the breaker wakes
// it (a reset ended); runs before the rule wait for their retry.
func TestAWokenLadderAsksForItsResetAgain(t *testing.T) {
	for _, wake := range []bool{true, false} {
		r := proofRules
		r.ResetWake = wake
		st, _ := onLadder(t, ladderPolicy())
		st.Follow(r)
		acts := st.Observe(standing(2, t0.Add(time.Minute)), t0.Add(time.Minute))
		wantKinds(t, "idle", acts, ActRepair)
		st.Report(Result{Action: acts[0], Outcome: Denied, Reason: "reset budget spent"}, t0.Add(time.Minute))
		acts = st.Woken(t0.Add(time.Minute + 5*time.Second))
		if got := len(acts) == 1 && acts[0].Kind == ActRepair && acts[0].Woken; got != wake {
			t.Fatalf("ResetWake %v: woken, actions %v", wake, kinds(acts))
		}
	}
}
