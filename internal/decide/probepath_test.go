package decide

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// pathPolicy resets, then reboots the node, and names a diagnostic for each path.
func pathPolicy() policy.Policy {
	p := ladderPolicy()
	p.Repair.Steps = append(p.Repair.Steps, policy.RepairStep{Kind: policy.RepairNode, Attempts: 1,
		Check: policy.Check{Timeout: policy.JSONDuration(time.Hour)}, Template: `{"kind":"Reboot"}`})
	p.ProbeAfter = map[policy.RepairKind]policy.Check{
		policy.RepairReset: {Image: "dcgm", Command: []string{"dcgmi", "diag", "-r", "2"}, Timeout: policy.JSONDuration(10 * time.Minute), Namespace: "probes"},
		policy.RepairNode:  {Image: "dcgm", Command: []string{"dcgmi", "diag", "-r", "3"}, Timeout: policy.JSONDuration(time.Hour), Namespace: "probes"},
	}
	return p
}

// A review after a reset runs the reset's diagnostic, one after a node step the node's, and one
// that follows no step (a lease that ran out, a person's release) the plain probe; a probe taken
// again after it did not run is the same path's.
func TestTheReviewsProbeFollowsItsPath(t *testing.T) {
	st, _ := onLadder(t, pathPolicy())
	st.Follow(notRunRules)
	acts := st.Observe(idle(2), t0)
	wantKinds(t, "idle", acts, ActRepair)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(time.Minute))
	wantKinds(t, "reset done", acts, ActProbe)
	if got := acts[0].Check.Command; len(got) != 4 || got[3] != "2" || st.Review.After != policy.RepairReset {
		t.Fatalf("after a reset the probe ran %v (review after %q)", got, st.Review.After)
	}
	if v := viewOf(st); v.Review == nil || v.Review.After != "reset" || v.Review.ProbeWith != "dcgm dcgmi diag -r 2" {
		t.Fatalf("view %+v", v.Review)
	}
	// It did not run; taken again, it is still the reset's.
	at := t0.Add(2 * time.Minute)
	wantKinds(t, "probe not run", st.Report(Result{Action: acts[0], Outcome: Done, Check: notRan("image not pulled")}, at))
	acts = st.Tick(at.Add(policy.DefaultNotRunRetry))
	wantKinds(t, "probe again", acts, ActProbe)
	if got := acts[0].Check.Command; len(got) != 4 || got[3] != "2" {
		t.Fatalf("the probe taken again ran %v", got)
	}
	// It fails: the reset's second attempt, then its review.
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: StepResult{Reason: "diag: memory test failed"}}, at.Add(5*time.Minute))
	acts = append(acts, st.Observe(idle(3), at.Add(6*time.Minute))...)
	reset := kindOf(t, "the second reset", acts, ActRepair)
	acts = st.Report(Result{Action: reset, Outcome: Done, Check: pass(at)}, at.Add(7*time.Minute))
	probe := kindOf(t, "the probe after the second reset", acts, ActProbe)
	if probe.Check.Command[3] != "2" {
		t.Fatalf("after the second reset the probe ran %v", probe.Check.Command)
	}
	acts = st.Report(Result{Action: probe, Outcome: Done, Check: StepResult{Reason: "diag: memory test failed"}}, at.Add(8*time.Minute))
	// The ladder's node step comes next; the probe after it is the node's.
	acts = append(acts, st.Observe(idle(4), at.Add(9*time.Minute))...)
	node := kindOf(t, "the node step", acts, ActRepair)
	if l := st.Quarantine.Ladder; st.Policy.Repair.Steps[l.Step].Kind != policy.RepairNode {
		t.Fatalf("not the node step: ladder %+v", l)
	}
	acts = st.Report(Result{Action: node, Outcome: Done, Check: pass(at)}, at.Add(time.Hour))
	if probe := kindOf(t, "the probe after the node step", acts, ActProbe); probe.Check.Command[3] != "3" || st.Review.After != policy.RepairNode {
		t.Fatalf("after a node step: %+v (review %+v)", probe.Check, st.Review)
	}
}

// kindOf is the last action of kind among acts.
func kindOf(t *testing.T, what string, acts []Action, kind ActionKind) Action {
	t.Helper()
	for i := len(acts) - 1; i >= 0; i-- {
		if acts[i].Kind == kind {
			return acts[i]
		}
	}
	t.Fatalf("%s: no %s among %+v", what, kind, acts)
	return Action{}
}

// A review no step led to probes with the policy's probe, whatever its paths name.
func TestAReviewAfterNoStepRunsThePlainProbe(t *testing.T) {
	p := pathPolicy()
	p.Repair = policy.Repair{}
	st, _ := onLadder(t, p)
	acts := st.Tick(t0.Add(p.QuarantineLease.D()))
	wantKinds(t, "lease over", acts, ActProbe)
	if acts[0].Check.Image != p.Probe.Image || st.Review.After != "" {
		t.Fatalf("after no step the probe ran %+v (after %q)", acts[0].Check, st.Review.After)
	}
	if v := viewOf(st); v.Review.After != "" || v.Review.ProbeWith != "busybox:1.37 sh -c exit 0" {
		t.Fatalf("view %+v", v.Review)
	}
}

// A review no passed step led to (a person's release of a device the ladder retired) probes with
// the plain probe, though the ladder's last try was a node step.
func TestAReleaseAfterRetirementRunsThePlainProbe(t *testing.T) {
	p := pathPolicy()
	p.Repair.Steps = p.Repair.Steps[1:] // the node step alone
	st, _ := onLadder(t, p)
	acts := st.Observe(idle(2), t0)
	node := kindOf(t, "the node step", acts, ActRepair)
	acts = st.Report(Result{Action: node, Outcome: Done, Check: pass(t0)}, t0.Add(time.Minute))
	probe := kindOf(t, "the probe after the node step", acts, ActProbe)
	acts = st.Report(Result{Action: probe, Outcome: Done, Check: StepResult{Reason: "diag failed"}}, t0.Add(2*time.Minute))
	if st.State != Retired {
		t.Fatalf("state %s after %+v", st.State, acts)
	}
	acts = st.Command(Command{Kind: CmdRelease, Actor: "op"}, t0.Add(time.Hour))
	if probe := kindOf(t, "the release's probe", acts, ActProbe); probe.Check.Image != p.Probe.Image || st.Review.After != "" {
		t.Fatalf("a release after retirement probed with %+v (after %q)", probe.Check, st.Review.After)
	}
}
