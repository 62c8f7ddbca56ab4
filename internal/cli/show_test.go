package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// `device show` lists each repair try with what followed it, and how long a repaired quarantine lasted.
func TestShowPrintsTheRepairLadder(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	st := decide.NewState(device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}, "node-1", policy.Default(), false)
	st.State = decide.Quarantined
	st.Quarantine = &decide.QuarantineRecord{RuleName: "r", CreatedAt: at, Ladder: &decide.Ladder{Step: 0, Attempt: 2, Tries: []decide.RepairTry{
		{Kind: policy.RepairReset, Attempt: 1, At: at, Result: &decide.StepResult{Reason: "exit code 1"}, Review: "not run: the step failed"},
		{Kind: policy.RepairReset, Attempt: 2, At: at.Add(time.Minute)},
	}}}
	st.Closed = []decide.QuarantineRecord{{CreatedAt: at.Add(-48 * time.Hour), ClosedAt: at.Add(-48*time.Hour + 3*time.Minute), ClosedBy: "devicewarden",
		Ladder: &decide.Ladder{Tries: []decide.RepairTry{{Kind: policy.RepairReset, Attempt: 1}}}}}
	var out bytes.Buffer
	if err := printDevice(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"reset attempt 1: passed=false exit code 1; review: not run: the step failed",
		"reset attempt 2: running",
		"repaired in:  3m0s (1 repair tries)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}
