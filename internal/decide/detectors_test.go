package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

// onlyDetector is an observation whose only reporter is a detector: the driver's own taint on
// its slice, or a DeviceHealthReport.
func onlyDetector(version int, r Reporter) Observation {
	o := obs(device.Unhealthy, version, "")
	o.Reporters = []Reporter{r}
	return o
}

// A device whose driver (or a detector's report) still says it failed, and that no Pod holds,
// is idle: the ladder takes its next try. Before DetectorsNotHolders it waited for the word to go.
func TestADetectorIsNotAHolder(t *testing.T) {
	for _, r := range []Reporter{
		{Slice: "node-1-gpus", Health: device.Unhealthy},
		{Report: "xid-79-gpu-3", Detector: "nvsentinel", Health: device.Unhealthy},
	} {
		for _, rule := range []bool{false, true} {
			st, _ := onLadder(t, ladderPolicy())
			st.rules.DetectorsNotHolders = rule
			acts := st.Observe(onlyDetector(2, r), t0.Add(time.Minute))
			if !rule {
				wantKinds(t, "without the rule", acts, ActInspectRule)
				if !strings.Contains(st.Next(), "repair once no Pod holds the device") {
					t.Fatalf("next: %s", st.Next())
				}
				continue
			}
			wantKinds(t, "only "+r.Slice+r.Report+" reports it", acts, ActRepair)
			if !st.Quarantine.Ladder.Running || st.Quarantine.Ladder.Tries[0].Kind != "reset" {
				t.Fatalf("ladder %+v", st.Quarantine.Ladder)
			}
			if strings.Contains(st.Next(), "no Pod holds") {
				t.Fatalf("next: %s", st.Next())
			}
		}
	}
}

// A Pod beside the detector still holds the device: no try while it runs there.
func TestAPodBesideADetectorHolds(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	st.rules.DetectorsNotHolders = true
	o := obs(device.Unhealthy, 2, "")
	o.Reporters = append(o.Reporters, Reporter{Report: "r", Detector: "dcgm", Health: device.Unhealthy})
	acts := st.Observe(o, t0.Add(time.Minute))
	wantKinds(t, "a Pod and a report", acts, ActInspectRule)
	if !strings.Contains(st.Next(), "repair once no Pod holds the device") {
		t.Fatalf("next: %s", st.Next())
	}
}

// A detector's fault quarantines a device whose Pod said nothing: when the watcher then learns of
// the Pod (a silent holder, after the fault's word was withdrawn), the Pod is moved once, and the
// ladder waits for it. Before DetectorsNotHolders only a unit's late holders moved.
func TestALateHolderOfADetectorsFaultMoves(t *testing.T) {
	p := ladderPolicy()
	p.Migration.Enabled = true
	for _, rule := range []bool{false, true} {
		st := NewState(dev, "node-1", p, false)
		st.Follow(Rules{ReleasePath: true, Repair: true, DetectorsNotHolders: rule})
		acts := st.Observe(onlyDetector(1, Reporter{Report: "prom:xid/" + dev.String(), Detector: "dcgm", Health: device.Unhealthy}), t0)
		wantKinds(t, "a detector's fault", acts, ActTaint, ActAlert)
		if more := st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0); len(more) > 0 && more[0].Kind == ActRepair {
			// Idle as far as the workflow knows: the reset activity itself finds the claim.
			st.Report(Result{Action: more[0], Outcome: Held, Reason: "claim ns/cl is still allocated"}, t0)
		}
		holder := Observation{Device: dev, Node: "node-1", Health: device.Healthy, StatusVersion: "2", ObservedAt: t0,
			Reporters: []Reporter{{Namespace: "ns", Pod: "job-0", Claim: "cl", Health: device.Healthy, Silent: true}}}
		st.Observe(holder, t0.Add(time.Second))
		moves := Look(st).HoldersToMove
		if !rule {
			if len(moves) != 0 {
				t.Fatalf("without the rule: %v", moves)
			}
			continue
		}
		if len(moves) != 1 || moves[0] != (PodRef{Namespace: "ns", Name: "job-0"}) {
			t.Fatalf("holders to move %v", moves)
		}
		Step(st, Event{Kind: EventResult, At: t0.Add(time.Second), Result: Result{Outcome: Moving, Pods: moves}})
		if again := Look(st).HoldersToMove; len(again) != 0 {
			t.Fatalf("moved twice: %v", again)
		}
		if !strings.Contains(st.Next(), "repair once no Pod holds the device") {
			t.Fatalf("next: %s", st.Next())
		}
	}
}

// A person's quarantine of a device its Pods call Healthy moves no Pod.
func TestAPersonsQuarantineMovesNoHolder(t *testing.T) {
	p := ladderPolicy()
	p.Migration.Enabled = true
	st := NewState(dev, "node-1", p, false)
	st.Follow(Rules{ReleasePath: true, Repair: true, DetectorsNotHolders: true})
	st.Observe(obs(device.Healthy, 1, ""), t0)
	acts := st.Command(Command{Kind: CmdForceQuarantine, Actor: "sre@example.com", Reason: "suspected silent corruption"}, t0)
	if len(acts) == 0 || acts[0].Kind != ActTaint {
		t.Fatalf("force quarantine: %v", kinds(acts))
	}
	st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, t0)
	if moves := Look(st).HoldersToMove; len(moves) != 0 || st.State != Quarantined {
		t.Fatalf("state %s moves %v", st.State, moves)
	}
}
