package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// `device show` lists each repair try with what followed it, and how long a repaired quarantine lasted.
func TestShowPrintsTheRepairLadder(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	st := &devicemsg.DeviceView{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}, Node: "node-1", State: devicemsg.Quarantined}
	st.Quarantine = &devicemsg.QuarantineView{RuleName: "r", CreatedAt: at, Ladder: &devicemsg.LadderView{Tries: []devicemsg.TryView{
		{Kind: "reset", Attempt: 1, At: at, Result: &devicemsg.StepResult{Reason: "exit code 1"}, Review: "not run: the step failed"},
		{Kind: "reset", Attempt: 2, At: at.Add(time.Minute)},
	}}}
	st.Closed = []devicemsg.QuarantineView{{CreatedAt: at.Add(-48 * time.Hour), ClosedAt: at.Add(-48*time.Hour + 3*time.Minute), ClosedBy: "devicewarden",
		Ladder: &devicemsg.LadderView{Tries: []devicemsg.TryView{{Kind: "reset", Attempt: 1}}}}}
	st.Reporters = []devicemsg.Reporter{{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: "Unhealthy"},
		{Report: "nvsentinel-x", Detector: "nvsentinel", Health: "Unhealthy"}, {Slice: "node-1-gpu", Health: "Unhealthy"}}
	var out bytes.Buffer
	if err := printDevice(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"reset attempt 1: passed=false exit code 1; review: not run: the step failed",
		"reset attempt 2: running",
		"repaired in:  3m0s (1 repair tries)",
		"Reported by:    ns/p container c claim cl: Unhealthy",
		"Reported by:    nvsentinel, DeviceHealthReport nvsentinel-x: Unhealthy",
		"Reported by:    its driver, ResourceSlice node-1-gpu: Unhealthy",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}

// `device show` says what made the fault and the step it chose, and the application faults the
// device stayed in service for.
func TestShowPrintsTheCause(t *testing.T) {
	st := &devicemsg.DeviceView{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}, State: devicemsg.Quarantined, AppFaults: 3, AppFaultsRecent: 2,
		Standing: []string{"dcgm: recovery-action:2"}}
	st.Quarantine = &devicemsg.QuarantineView{RuleName: "r", Cause: "xid 79 (PCI 0000:3b:00)", First: "node", FirstWhy: "catalogue: xid 79"}
	var out bytes.Buffer
	if err := printDevice(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Cause:               xid 79 (PCI 0000:3b:00)",
		"First step:          node (catalogue: xid 79)",
		"Application faults:  3, 2 of them within the policy's window",
		"Still reported:      dcgm: recovery-action:2 (a release waits for it)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}
