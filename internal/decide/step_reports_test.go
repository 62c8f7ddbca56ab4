package decide

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

// inWindowAfterAReset runs a reset that passes, its probe and its canary, under rules r and a
// ten-minute stability window: the device waits out the window on probation from t0+4m.
func inWindowAfterAReset(t *testing.T, r Rules) *DeviceState {
	t.Helper()
	p := ladderPolicy()
	p.StabilityWindow = 600e9
	st, _ := onLadder(t, p)
	st.Follow(r)
	acts := st.Observe(idle(2), t0.Add(time.Minute))
	wantKinds(t, "idle", acts, ActRepair)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0.Add(2 * time.Minute))}, t0.Add(2*time.Minute))
	wantKinds(t, "reset done", acts, ActProbe)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(3*time.Minute))
	acts = st.Report(Result{Action: acts[0], Outcome: Done}, t0.Add(3*time.Minute))
	wantKinds(t, "on probation", acts, ActCanary)
	acts = st.Report(Result{Action: acts[0], Outcome: Done, Check: pass(t0)}, t0.Add(4*time.Minute))
	wantKinds(t, "canary passed", acts)
	if st.State != Recovering || st.Review.Stage != StageStability {
		t.Fatalf("state %s review %+v", st.State, st.Review)
	}
	return st
}

// driverSays is the driver's word on the idle device, observed at at.
func driverSays(h device.Health, version int, at time.Time) Observation {
	o := obs(h, version, SourceSlice)
	o.Reporters, o.ObservedAt = nil, at
	return o
}

// A report the driver made while the reset ran (queued behind the step, the probe and the
// canary in one execution) describes the device during its repair: it does not fail the
// review that follows. A report made after the review began still does.
func TestReportsFromDuringTheStepDoNotFailItsReview(t *testing.T) {
	r := Rules{ReleasePath: true, Repair: true, StepAlerts: true, LadderTrust: true, StepReports: true}
	st := inWindowAfterAReset(t, r)
	during := driverSays(device.Unknown, 3, t0.Add(90*time.Second))
	wantKinds(t, "Unknown from during the reset", st.Observe(during, t0.Add(5*time.Minute)))
	wantKinds(t, "Unhealthy from during the reset", st.Observe(driverSays(device.Unhealthy, 4, t0.Add(100*time.Second)), t0.Add(5*time.Minute)))
	if st.State != Recovering {
		t.Fatalf("a report from during the reset failed the review: state %s", st.State)
	}
	acts := st.Tick(t0.Add(14 * time.Minute))
	wantKinds(t, "window over", acts, ActRelease)

	st = inWindowAfterAReset(t, r)
	acts = st.Observe(driverSays(device.Unhealthy, 3, t0.Add(5*time.Minute)), t0.Add(5*time.Minute))
	if st.State != Quarantined || len(acts) == 0 {
		t.Fatalf("a report made during the review left it standing: state %s, actions %v", st.State, kinds(acts))
	}

	// Runs recorded before the rule fail the review on the early report, as they did.
	r.StepReports = false
	st = inWindowAfterAReset(t, r)
	st.Observe(during, t0.Add(5*time.Minute))
	if st.State != Quarantined {
		t.Fatalf("without StepReports: state %s", st.State)
	}
}
