package workflows

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A reset whose domain is the baseboard, with holders: move: the reset finds a job on another GPU
// of the baseboard, which the workflow moves with the policy's migration; the reset looks again,
// runs once the baseboard is free, and the device is released with its domain's fences lifted.
func TestAResetMovesItsDomainsHoldersFirst(t *testing.T) {
	h := newHarness(0)
	busy := decide.StepResult{Busy: true, Reason: "claim team/train-0-gpu is still allocated gpu-3", Holders: []string{"team/train-0"}}
	h.checks = []decide.StepResult{busy, busy, {Passed: true, Reason: "reset exit 0"}}
	_, started := movedWorkloads(h)
	p := laddered()
	p.ResetDomain = "attribute:baseboard"
	p.Migration = policy.DefaultMigration()
	p.Migration.Enabled = true
	p.Repair.Steps[0].Attempts, p.Repair.Steps[0].Holders = 1, policy.HoldersMove
	failedThenIdle(h)
	start := h.env.Now()
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	if err := h.env.GetWorkflowError(); err != nil || len(h.released) != 1 || !h.released[0].NodeFence {
		t.Fatalf("workflow ended with %v, released %+v", err, h.released)
	}
	var resets []remediation.CheckInput
	for _, in := range h.ran {
		if in.Kind == decide.ActRepair {
			resets = append(resets, in)
		}
	}
	if len(resets) != 3 || resets[0].Domain != "attribute:baseboard" || resets[0].Holders != policy.HoldersMove {
		t.Fatalf("resets %+v", resets)
	}
	var moved int
	for _, m := range *started {
		if m.Workload.Name == "train" && m.Device == gpu0 {
			moved++
		}
	}
	if moved != 1 {
		t.Fatalf("the baseboard's job moved %d times: %+v", moved, *started)
	}
	if d := h.releaseAttempts[0].Sub(start); d > 3*time.Minute {
		t.Fatalf("released %s after the fault: a busy domain looked again later than every %s", d, decide.MoveRetry)
	}
}
