package breaker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// Resets have a budget of their own: the window allows MaxResets devices, a refused reset neither
// opens the breaker nor uses what quarantines need, and an open breaker refuses resets too.
func TestResetsHaveABudgetOfTheirOwn(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true}
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxResets: 3}
	ask := func(i int, action decide.State, at time.Time) PermitResult {
		return b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprintf("gpu-%d", i)}, Action: action, Config: cfg}, at)
	}
	for i := range 3 {
		if r := ask(i, Reset, now); !r.Granted {
			t.Fatalf("reset %d refused: %s", i, r.Reason)
		}
	}
	if r := ask(0, Reset, now); !r.Granted {
		t.Fatalf("a device's next try in the window: %s", r.Reason)
	}
	r := ask(3, Reset, now)
	if r.Granted || r.Tripped || b.Open || !strings.Contains(r.Reason, "reset budget spent: 3 resets") {
		t.Fatalf("fourth device: %+v, open %v", r, b.Open)
	}
	if r := ask(10, decide.Quarantined, now); !r.Granted {
		t.Fatalf("a quarantine after the reset budget was spent: %s", r.Reason)
	}
	if r := ask(3, Reset, now.Add(11*time.Minute)); !r.Granted {
		t.Fatalf("a reset once the window moved: %s", r.Reason)
	}
	b.Open, b.Reason = true, "paused by hand"
	denied := b.Denied
	if r := ask(4, Reset, now.Add(11*time.Minute)); r.Granted || b.Denied != denied+1 {
		t.Fatalf("an open breaker granted a reset, or did not count its refusal (%d denied)", b.Denied)
	}
	if err := (Config{Window: time.Minute, MaxCount: 1, MaxResets: -1}).Validate(); err == nil {
		t.Fatal("a negative reset budget was accepted")
	}
	if (Config{}).Resets() != DefaultMaxResets {
		t.Fatal("no default reset budget")
	}
}

// Node steps (reboots) have a budget of their own too, apart from resets: resets spent leave the
// reboots' budget whole, and the reboots spent refuse the next device without opening anything.
func TestRebootsHaveABudgetOfTheirOwn(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true}
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxResets: 2, MaxReboots: 2}
	ask := func(i int, action decide.State, at time.Time) PermitResult {
		return b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprintf("gpu-%d", i)}, Action: action, Config: cfg}, at)
	}
	for i := range 2 {
		if r := ask(i, Reset, now); !r.Granted {
			t.Fatalf("reset %d refused: %s", i, r.Reason)
		}
	}
	for i := range 2 {
		if r := ask(i, Reboot, now); !r.Granted {
			t.Fatalf("reboot %d refused after the resets: %s", i, r.Reason)
		}
	}
	if r := ask(0, Reboot, now); !r.Granted {
		t.Fatalf("a device's next reboot in the window: %s", r.Reason)
	}
	r := ask(2, Reboot, now)
	if r.Granted || r.Tripped || b.Open || !strings.Contains(r.Reason, "reboot budget spent: 2 node steps") || b.Denied != 1 {
		t.Fatalf("third device: %+v, open %v, denied %d", r, b.Open, b.Denied)
	}
	if r := ask(10, decide.Quarantined, now); !r.Granted {
		t.Fatalf("a quarantine after the reboot budget was spent: %s", r.Reason)
	}
	if r := ask(2, Reboot, now.Add(11*time.Minute)); !r.Granted {
		t.Fatalf("a reboot once the window moved: %s", r.Reason)
	}
	if BudgetOf(Reboot) == BudgetOf(Reset) || !OwnBudget(Reboot) || OwnBudget(decide.Quarantined) {
		t.Fatal("reboots share a budget")
	}
	if err := (Config{Window: time.Minute, MaxCount: 1, MaxReboots: -1}).Validate(); err == nil {
		t.Fatal("a negative reboot budget was accepted")
	}
	if (Config{}).Reboots() != DefaultMaxReboots || (Config{MaxReboots: 4}).Reboots() != 4 {
		t.Fatal("reboot budget default")
	}
}
