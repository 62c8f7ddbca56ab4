package breaker

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

func gpu(i int) device.ID { return device.ID{Driver: "d", Pool: "p", Device: fmt.Sprintf("gpu-%d", i)} }

func resetEnded(b *State, i int, failed bool, now time.Time) string {
	id := gpu(i)
	rel := PermitRelease{Key: PermitRequest{Device: id, Action: Reset}.Key(), Holder: id.String(), Failed: failed}
	if failed {
		rel.Reason = "exit 1"
	}
	return b.ResetEnded(rel, now)
}

// Resets are counted at a time: MaxResets run at once, the next waits for one to end, and a storm
// of faults is reset as fast as that allows, whatever the window. A device's retried request
// shares its permit; a permit never given back lasts its hold.
func TestResetsAreCountedAtATime(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true, RenewsHolds: true, ResetsAtATime: true}
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxResets: 3}
	ask := func(i int, at time.Time) PermitResult {
		return b.Acquire(PermitRequest{Device: gpu(i), Action: Reset, Config: cfg}, at)
	}
	for i := range 3 {
		if r := ask(i, now); !r.Granted {
			t.Fatalf("reset %d refused: %s", i, r.Reason)
		}
	}
	if r := ask(0, now); !r.Granted {
		t.Fatalf("a device asking again for its own reset: %s", r.Reason)
	}
	r := ask(3, now)
	if r.Granted || b.Open || b.Denied != 1 || !strings.Contains(r.Reason, "3 resets running (d/p/gpu-0, d/p/gpu-1, d/p/gpu-2; max 3 at a time)") {
		t.Fatalf("a fourth at once: %+v, %d denied", r, b.Denied)
	}
	// Fifty faults within the window: each reset that ends lets the next one run.
	done := 3
	for i := 3; i < 50; i++ {
		resetEnded(b, i-3, false, now.Add(time.Duration(i)*time.Second))
		if r := ask(i, now.Add(time.Duration(i)*time.Second)); !r.Granted {
			t.Fatalf("reset %d after one ended: %s", i, r.Reason)
		}
		done++
	}
	if done != 50 {
		t.Fatalf("%d resets", done)
	}
	// A permit never given back (its worker died) frees its place once its hold ends.
	if r := ask(60, now.Add(time.Minute)); r.Granted {
		t.Fatal("a fourth while three run")
	}
	if r := ask(60, now.Add(time.Minute+DefaultResetHold)); !r.Granted {
		t.Fatalf("after the holds ended: %s", r.Reason)
	}
	// Restrictions and quarantines keep their budgets.
	if r := b.Acquire(PermitRequest{Device: gpu(99), Action: decide.Quarantined, Config: cfg}, now); !r.Granted {
		t.Fatalf("a quarantine: %s", r.Reason)
	}
}

// Failed resets within the window stop resets, with one alert that names them, until a person
// resumes the breaker or the window passes them by. A reset that passed, or ran nothing, is no
// failure; runs before the change count nothing.
func TestFailedResetsStopResets(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxResets: 5, MaxResetFailures: 2}
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, RenewsHolds: true, ResetsAtATime: true, Config: cfg}
	ask := func(i int, at time.Time) PermitResult {
		return b.Acquire(PermitRequest{Device: gpu(i), Action: Reset, Config: cfg}, at)
	}
	for i := range 3 {
		ask(i, now)
	}
	if a := resetEnded(b, 0, false, now); a != "" || len(b.ResetFailures) != 0 {
		t.Fatalf("a passed reset counted: %q %v", a, b.ResetFailures)
	}
	if a := resetEnded(b, 1, true, now.Add(time.Minute)); a != "" || b.ResetsHeld {
		t.Fatalf("one failure held resets: %q", a)
	}
	a := resetEnded(b, 2, true, now.Add(2*time.Minute))
	if !b.ResetsHeld || !strings.Contains(a, "2 resets failed within 10m0s: d/p/gpu-1 (exit 1); d/p/gpu-2 (exit 1)") {
		t.Fatalf("held %v, alert %q", b.ResetsHeld, a)
	}
	if again := resetEnded(b, 2, true, now.Add(2*time.Minute)); again != "" || len(b.ResetFailures) != 2 {
		t.Fatalf("a release sent again: alert %q, failures %v", again, b.ResetFailures)
	}
	if r := ask(7, now.Add(3*time.Minute)); r.Granted || b.Denied != 1 || !strings.HasPrefix(r.Reason, "resets held: 2 resets failed") {
		t.Fatalf("a reset while held: %+v, %d denied", r, b.Denied)
	}
	if r := b.Acquire(PermitRequest{Device: gpu(8), Action: decide.Quarantined, Config: cfg}, now.Add(3*time.Minute)); !r.Granted {
		t.Fatalf("quarantines go on while resets are held: %s", r.Reason)
	}
	// The window passes the first failure by: resets go on.
	if r := ask(7, now.Add(11*time.Minute+time.Second)); !r.Granted || b.ResetsHeld {
		t.Fatalf("after the window: %+v held %v", r, b.ResetsHeld)
	}
	// Or a person resumes.
	ask(8, now.Add(12*time.Minute))
	resetEnded(b, 7, true, now.Add(12*time.Minute))
	resetEnded(b, 8, true, now.Add(12*time.Minute))
	if !b.ResetsHeld {
		t.Fatal("not held again")
	}
	b.Resume("ops", now.Add(13*time.Minute))
	if r := ask(9, now.Add(13*time.Minute)); !r.Granted || len(b.ResetFailures) != 0 {
		t.Fatalf("after resume: %+v %v", r, b.ResetFailures)
	}
	// Before the change: nothing counted.
	old := &State{Config: cfg}
	for i := range 5 {
		old.Grants = append(old.Grants, Grant{Device: gpu(i).String(), Action: Reset, Holder: gpu(i).String(), At: now, Until: now.Add(time.Hour)})
		if a := resetEnded(old, i, true, now); a != "" || len(old.ResetFailures) != 0 {
			t.Fatalf("an old run counted a failure: %q", a)
		}
	}
	if err := (Config{Window: time.Minute, MaxCount: 1, MaxResetFailures: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "max reset failures") {
		t.Fatalf("validate: %v", err)
	}
	if (Config{}).ResetFailuresMax() != DefaultMaxResetFailures {
		t.Fatal("default")
	}
}

// A device refused a reset for the budget waits to be woken: when a reset ends, as many as there
// are free places, oldest first; none while failed resets hold resets; and a breaker started
// before the change wakes none.
func TestAResetEndingWakesTheNextDevice(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true, RenewsHolds: true, ResetsAtATime: true, WakesResets: true}
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxResets: 2, MaxResetFailures: 2}
	ask := func(i int) PermitResult {
		return b.Acquire(PermitRequest{Device: gpu(i), Action: Reset, Config: cfg}, now)
	}
	for i := range 6 {
		ask(i)
	}
	ask(3) // asking again is one place in the list
	if !slices.Equal(b.ResetWaiting, []string{"d/p/gpu-2", "d/p/gpu-3", "d/p/gpu-4", "d/p/gpu-5"}) || b.WakeResets() != nil {
		t.Fatalf("waiting %v", b.ResetWaiting)
	}
	resetEnded(b, 0, false, now)
	if got := b.WakeResets(); !slices.Equal(got, []string{"d/p/gpu-2"}) {
		t.Fatalf("woken %v", got)
	}
	if r := ask(2); !r.Granted {
		t.Fatalf("the woken device: %s", r.Reason)
	}
	if r := ask(3); r.Granted || !slices.Equal(b.ResetWaiting, []string{"d/p/gpu-3", "d/p/gpu-4", "d/p/gpu-5"}) {
		t.Fatalf("gpu-2 running, gpu-3 asking: %+v, waiting %v", r, b.ResetWaiting)
	}
	resetEnded(b, 1, true, now)
	resetEnded(b, 2, true, now) // two failures: resets held
	if !b.ResetsHeld || b.WakeResets() != nil {
		t.Fatalf("held %v, woken while held", b.ResetsHeld)
	}
	b.ResetsHeld = false
	if got := b.WakeResets(); !slices.Equal(got, []string{"d/p/gpu-3", "d/p/gpu-4"}) || len(b.ResetWaiting) != 1 {
		t.Fatalf("two places free: woken %v, left %v", got, b.ResetWaiting)
	}
	if r := ask(5); !r.Granted || len(b.ResetWaiting) != 0 {
		t.Fatalf("a waiting device granted on its own retry stays in the list: %+v, %v", r, b.ResetWaiting)
	}
	old := &State{ResetsAtATime: true}
	old.Acquire(PermitRequest{Device: gpu(0), Action: Reset, Config: Config{Window: time.Minute, MaxCount: 5, MaxResets: 1}}, now)
	old.Acquire(PermitRequest{Device: gpu(1), Action: Reset, Config: Config{Window: time.Minute, MaxCount: 5, MaxResets: 1}}, now)
	if len(old.ResetWaiting) != 0 || old.WakeResets() != nil {
		t.Fatalf("a breaker from before the change: %v", old.ResetWaiting)
	}
}
