package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// approvedReboot resets once, then reboots the node only with a person's approval.
func approvedReboot() policy.Policy {
	p := ladderPolicy()
	p.Repair.Steps[0].Attempts = 1
	p.Repair.Steps = append(p.Repair.Steps, policy.RepairStep{Kind: policy.RepairNode, Attempts: 1, Approval: true, Holders: policy.HoldersWait,
		Check: policy.Check{Timeout: policy.JSONDuration(10 * time.Minute)}, Template: `{"apiVersion": "r.example.com/v1", "kind": "Reboot"}`})
	p.ApprovalTimeout = policy.JSONDuration(time.Hour)
	return p
}

// toApproval climbs an approvedReboot ladder until the node step waits for its approval.
func toApproval(t *testing.T) *DeviceState {
	t.Helper()
	st, _ := onLadder(t, approvedReboot())
	acts := st.Observe(idle(2), t0)
	wantKinds(t, "idle", acts, ActRepair)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "reset exit 1"}}, t0.Add(time.Minute))
	wantKinds(t, "reset failed", acts, ActRequestApproval)
	if id, step := st.StepApproval(); id != "repair-2" || step != "node" || !strings.Contains(acts[0].Reason, "repair step node (attempt 1 of 1) on node node-1") {
		t.Fatalf("approval %q %q: %s", id, step, acts[0].Reason)
	}
	if !st.NextDeadline().Equal(t0.Add(time.Minute+time.Hour)) || !strings.Contains(st.Next(), "repair step node waits for approval until") {
		t.Fatalf("next deadline %s; next: %s", st.NextDeadline(), st.Next())
	}
	return st
}

// A step that needs approval runs once approved, as that person's try; never before.
func TestLadderStepRunsOnlyOnApproval(t *testing.T) {
	st := toApproval(t)
	if acts := st.Observe(idle(3), t0.Add(2*time.Minute)); len(acts) != 0 {
		t.Fatalf("a report ran the step without approval: %+v", acts)
	}
	if err := st.Validate(Command{Kind: CmdApprove, Actor: "ana", Review: "repair-1"}); err == nil || !strings.Contains(err.Error(), "left over from an earlier step") {
		t.Fatalf("a stale approval: %v", err)
	}
	if err := st.Validate(Command{Kind: CmdApprove, Actor: "ana", Review: "repair-2"}); err != nil {
		t.Fatal(err)
	}
	acts := st.Command(Command{Kind: CmdApprove, Actor: "ana@example.com", Review: "repair-2"}, t0.Add(3*time.Minute))
	wantKinds(t, "approved", acts, ActRepair)
	l := st.Quarantine.Ladder
	if l.Step != 1 || l.Attempt != 1 || len(l.Tries) != 2 || l.Tries[1].Kind != policy.RepairNode || l.ApprovedBy != "ana@example.com" || l.Awaiting {
		t.Fatalf("ladder %+v", l)
	}
	if id, _ := st.StepApproval(); id != "" || !st.NextDeadline().Equal(st.Quarantine.ExpiresAt) {
		t.Fatalf("still waiting: %q, deadline %s", id, st.NextDeadline())
	}
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0.Add(4 * time.Minute))}, t0.Add(4*time.Minute))
	wantKinds(t, "rebooted", acts, ActProbe)
}

// An approval while a Pod holds the device again runs the step once the device is idle, with no
// second request; a step the breaker put off runs again without asking again.
func TestLadderApprovalWaitsForIdleAndHoldsAcrossRetries(t *testing.T) {
	st := toApproval(t)
	st.Observe(obs(device.Unhealthy, 4, ""), t0.Add(2*time.Minute))
	if acts := st.Command(Command{Kind: CmdApprove, Actor: "ana"}, t0.Add(3*time.Minute)); len(acts) != 0 {
		t.Fatalf("a step under a holder: %+v", acts)
	}
	acts := st.Observe(idle(5), t0.Add(4*time.Minute))
	wantKinds(t, "idle after approval", acts, ActRepair)
	acts = st.Report(Result{Action: acts[0], Outcome: Denied, Reason: "reboot budget spent"}, t0.Add(4*time.Minute))
	wantKinds(t, "put off", acts)
	acts = st.Tick(t0.Add(4*time.Minute + BreakerRetry))
	wantKinds(t, "retried", acts, ActRepair)
}

// A rejection, or no answer within approvalTimeout, stops the ladder: the quarantine waits for its
// review, and nothing is asked or run until then.
func TestLadderStopsWithoutApproval(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  func(st *DeviceState) []Action
		want string
	}{
		{"rejected", func(st *DeviceState) []Action {
			return st.Command(Command{Kind: CmdReject, Actor: "bo", Reason: "not during the run"}, t0.Add(5*time.Minute))
		}, "node step rejected by bo: not during the run"},
		{"no answer", func(st *DeviceState) []Action { return st.Tick(t0.Add(2 * time.Hour)) }, "node step had no approval within 1h0m0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := toApproval(t)
			acts := tt.end(st)
			wantKinds(t, tt.name, acts)
			last := st.Transitions[len(st.Transitions)-1]
			if !strings.Contains(last.Reason, "repair stopped: "+tt.want) || st.State != Quarantined {
				t.Fatalf("last transition %+v, state %s", last, st.State)
			}
			if id, _ := st.StepApproval(); id != "" || !st.NextDeadline().Equal(st.Quarantine.ExpiresAt) {
				t.Fatalf("still waiting (%q) or a deadline before the review (%s)", id, st.NextDeadline())
			}
			if acts := st.Observe(idle(9), t0.Add(3*time.Hour)); len(acts) != 0 {
				t.Fatalf("a stopped ladder climbed: %+v", acts)
			}
			if err := st.Validate(Command{Kind: CmdApprove, Actor: "ana"}); err == nil {
				t.Fatal("an approval with nothing waiting was accepted")
			}
		})
	}
}

// A waiting step the policy no longer has (a new run with a shorter ladder) waits for nothing.
func TestStepApprovalOfAStepThePolicyLost(t *testing.T) {
	st := toApproval(t)
	st.Policy.Repair.Steps = st.Policy.Repair.Steps[:1]
	if id, step := st.StepApproval(); id != "" || step != "" || repairOf(st).stepAwaiting() {
		t.Fatalf("waits for %q %q", id, step)
	}
}
