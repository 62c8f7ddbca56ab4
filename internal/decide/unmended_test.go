package decide

import (
	"testing"
	"time"
)

// A repair step's plan says when the device's fault was last left unmended, which decides
// whether another device's reset of its domain mended it: the quarantine's start before any try.
func TestARepairPlanSaysSinceWhenTheFaultStands(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	st.Follow(notRunRules)
	acts := st.Observe(idle(2), t0.Add(time.Second))
	wantKinds(t, "idle", acts, ActRepair)
	if got := Prepare(st, acts[0]).Plan.Since; got.IsZero() || !got.Equal(st.Quarantine.CreatedAt) {
		t.Fatalf("since %s, the quarantine began %s", got, st.Quarantine.CreatedAt)
	}
}

// The fault was last left unmended at the end of the latest try that ran, whatever order the
// tries are recorded in; a try with no result yet, or one that ended before the quarantine
// began, does not count; with no ladder, at the quarantine's start.
func TestUnmendedSince(t *testing.T) {
	at := func(m int) *StepResult { return &StepResult{At: t0.Add(time.Duration(m) * time.Minute)} }
	for _, tt := range []struct {
		name  string
		q     QuarantineRecord
		wantM int
	}{
		{"no ladder", QuarantineRecord{CreatedAt: t0}, 0},
		{"no try", QuarantineRecord{CreatedAt: t0, Ladder: &Ladder{}}, 0},
		{"a try running", QuarantineRecord{CreatedAt: t0, Ladder: &Ladder{Tries: []RepairTry{{}}}}, 0},
		{"the latest of two", QuarantineRecord{CreatedAt: t0, Ladder: &Ladder{Tries: []RepairTry{{Result: at(9)}, {Result: at(4)}}}}, 9},
		{"one from before", QuarantineRecord{CreatedAt: t0, Ladder: &Ladder{Tries: []RepairTry{{Result: at(-3)}}}}, 0},
	} {
		if got := tt.q.unmendedSince(); !got.Equal(t0.Add(time.Duration(tt.wantM) * time.Minute)) {
			t.Errorf("%s: %s", tt.name, got)
		}
	}
}

// The boot a node step last saw: a step taken again after it did not run uses the boot it saw
// before it (its reboot is done); otherwise the newest try's that recorded one.
func TestBootSeen(t *testing.T) {
	st := &DeviceState{Quarantine: &QuarantineRecord{CreatedAt: t0, Ladder: &Ladder{Tries: []RepairTry{
		{Result: &StepResult{BootID: "boot-1"}}, {Result: &StepResult{}}, {}}}}}
	if got := repairOf(st).bootSeen(); got != "boot-1" {
		t.Fatalf("from the tries: %q", got)
	}
	st.NotRun = &NotRunWait{Kind: ActRepair, BootID: "boot-0"}
	if got := repairOf(st).bootSeen(); got != "boot-0" {
		t.Fatalf("a step that did not run: %q", got)
	}
	st.NotRun = &NotRunWait{Kind: ActRepair}
	if got := repairOf(st).bootSeen(); got != "boot-1" {
		t.Fatalf("a not-run that saw no boot: %q", got)
	}
	st.NotRun = &NotRunWait{Kind: ActProbe, BootID: "boot-0"}
	if got := repairOf(st).bootSeen(); got != "boot-1" {
		t.Fatalf("a probe that did not run: %q", got)
	}
	if got := repairOf(&DeviceState{Quarantine: &QuarantineRecord{}}).bootSeen(); got != "" {
		t.Fatalf("no ladder: %q", got)
	}
}
