package breaker

import (
	"strings"
	"testing"
	"time"
)

// The brake counts devices: one GPU whose resets fail again and again is one device, not a
// broken reset tool, and does not stop resets fleet-wide; a second device's failure does.
func TestTheBrakeCountsDevices(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	cfg := Config{Window: time.Hour, MaxCount: 20, MaxResets: 5, MaxResetFailures: 2}
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, RenewsHolds: true, ResetsAtATime: true, DeviceBrake: true, Config: cfg}
	ask := func(i int, at time.Time) PermitResult {
		return b.Acquire(PermitRequest{Device: gpu(i), Action: Reset, Config: cfg}, at)
	}
	for try := range 3 {
		at := now.Add(time.Duration(try) * time.Minute)
		if r := ask(0, at); !r.Granted {
			t.Fatalf("gpu-0's try %d refused: %s", try, r.Reason)
		}
		if a := resetEnded(b, 0, true, at); a != "" || b.ResetsHeld {
			t.Fatalf("gpu-0's failed try %d held resets fleet-wide: %q", try, a)
		}
	}
	ask(1, now.Add(5*time.Minute))
	a := resetEnded(b, 1, true, now.Add(5*time.Minute))
	if !b.ResetsHeld || !strings.Contains(a, "resets of 2 devices failed within 1h0m0s") {
		t.Fatalf("two devices failed: held %v, alert %q", b.ResetsHeld, a)
	}
	// Held while gpu-0's last failure is in the window, beside gpu-1's.
	b.pruneFailures(now.Add(time.Hour + time.Minute + time.Second))
	if !b.ResetsHeld {
		t.Fatal("released while both devices' failures are in the window")
	}
	b.pruneFailures(now.Add(time.Hour + 2*time.Minute + time.Second))
	if b.ResetsHeld {
		t.Fatal("still held with one device's failures left")
	}
}

// A reset that outran its permit's hold (another request pruned the lapsed permit meanwhile)
// still counts its failure when it ends, once; a permit that lapsed before the window counts
// nothing.
func TestALapsedResetStillCountsItsFailure(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	cfg := Config{Window: time.Hour, MaxCount: 20, MaxResets: 5, MaxResetFailures: 1}
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, RenewsHolds: true, ResetsAtATime: true, DeviceBrake: true, Config: cfg}
	if r := b.Acquire(PermitRequest{Device: gpu(0), Action: Reset, Config: cfg, Hold: 10 * time.Minute}, now); !r.Granted {
		t.Fatal(r.Reason)
	}
	// Another device asks after the hold: the lapsed permit leaves the grants.
	b.Acquire(PermitRequest{Device: gpu(1), Action: Reset, Config: cfg}, now.Add(11*time.Minute))
	if len(b.resetsRunning()) != 1 || len(b.LapsedResets) != 1 {
		t.Fatalf("running %v, lapsed %v", b.resetsRunning(), b.LapsedResets)
	}
	a := resetEnded(b, 0, true, now.Add(12*time.Minute))
	if !b.ResetsHeld || !strings.Contains(a, "d/p/gpu-0 (exit 1)") || len(b.LapsedResets) != 0 {
		t.Fatalf("a lapsed reset's failure: held %v, alert %q, lapsed %v", b.ResetsHeld, a, b.LapsedResets)
	}
	b.Resume("ops", now.Add(13*time.Minute))
	if again := resetEnded(b, 0, true, now.Add(13*time.Minute)); again != "" || len(b.ResetFailures) != 0 {
		t.Fatalf("the same end sent again counted: %q %v", again, b.ResetFailures)
	}
	// gpu-1's permit (the default hold) lapses and the window passes it by: it is forgotten.
	b.Acquire(PermitRequest{Device: gpu(2), Action: Reset, Config: cfg}, now.Add(2*time.Hour))
	if len(b.LapsedResets) != 0 {
		t.Fatalf("lapsed permits kept past the window: %v", b.LapsedResets)
	}
	// Before the change: a lapsed permit counts nothing.
	old := &State{SeparateBudgets: true, OpenDeniesAll: true, RenewsHolds: true, ResetsAtATime: true, Config: cfg}
	old.Acquire(PermitRequest{Device: gpu(0), Action: Reset, Config: cfg, Hold: time.Minute}, now)
	old.Acquire(PermitRequest{Device: gpu(1), Action: Reset, Config: cfg}, now.Add(2*time.Minute))
	if a := resetEnded(old, 0, true, now.Add(3*time.Minute)); a != "" || len(old.LapsedResets) != 0 {
		t.Fatalf("an old run counted a lapsed reset: %q", a)
	}
}
