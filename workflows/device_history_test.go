package workflows

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	fault "github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// historyRun is one run of gpu-0's workflow at start over the shared records: a report at 1 s,
// then, a minute later, no Pod holds the device. It returns the harness once the run ended
// (idle) or an hour passed (the run is then cancelled), with the state it had then.
func historyRun(t *testing.T, records *historyStore, start time.Time, p policy.Policy, report decide.Observation, prepare func(*harness)) (*harness, decide.DeviceState) {
	t.Helper()
	h := newHarness(0)
	h.history.entries = records.entries
	h.env.SetStartTime(start)
	h.env.OnActivity("NoteAppFault", mock.Anything, mock.Anything).Return(func(context.Context, remediation.AppFaultInput) error { return nil }).Maybe()
	if prepare != nil {
		prepare(h)
	}
	report.Device, report.Node = gpu0, "node-1"
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(api.SignalObservation, report) }, time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Healthy, StatusVersion: next(report.StatusVersion)})
	}, time.Minute)
	return h, runAnHour(h, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
}

// runAnHour runs gpu-0's workflow from in until it ends or an hour passed (it is then
// cancelled), and returns the state it had then.
func runAnHour(h *harness, in api.DeviceInput) decide.DeviceState {
	var got decide.DeviceState
	h.env.RegisterDelayedCallback(func() {
		if v, err := h.env.QueryWorkflow(api.QueryState); err == nil {
			_ = v.Get(&got)
		}
		h.env.CancelWorkflow()
	}, time.Hour)
	h.env.ExecuteWorkflow(DeviceWorkflow, in)
	return got
}

// next is the status version after ver.
func next(ver string) string {
	n, _ := strconv.Atoi(ver)
	return strconv.Itoa(n + 1)
}

// appFault is a Pod's report of XID 31, the application's own fault, in a status of version ver.
func appFault(ver string) decide.Observation {
	return decide.Observation{Health: device.Unhealthy, StatusVersion: ver, Cause: &fault.Cause{XID: 31},
		Reporters: []decide.Reporter{{Namespace: "ns", Pod: "job-" + ver}}}
}

// Five jobs crash on XID 31 within the hour, each leaving the device idle, so each fault's run
// ends: the faults add up across the runs, and the fifth fences the device (the policy's
// applicationFaults: 5 within an hour). Before the history outlived the run, every run counted
// from one and a bad GPU hid behind application errors for ever.
func TestApplicationFaultsOfSeparateRunsAddUp(t *testing.T) {
	records := newHistoryStore()
	t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for run := 1; run <= 5; run++ {
		ver := strconv.Itoa(run * 10)
		h, _ := historyRun(t, records, t0.Add(time.Duration(run)*5*time.Minute), policy.Default(), appFault(ver), nil)
		if run < 5 {
			if err := h.env.GetWorkflowError(); err != nil || len(h.quarantine) != 0 {
				t.Fatalf("run %d: ended with %v, quarantines %+v: an application fault under the limit fences nothing", run, err, h.quarantine)
			}
			if got := records.entry("node-1", gpu0.String()); len(got.AppFaults) != run {
				t.Fatalf("run %d: the record keeps %d application faults, want %d: %+v", run, len(got.AppFaults), run, got)
			}
			continue
		}
		if len(h.quarantine) != 1 || !strings.Contains(h.quarantine[0].Reason, "5 application faults within 1h0m0s") {
			t.Fatalf("the fifth application fault within the hour, in a run of its own, fenced %+v", h.quarantine)
		}
	}
}

// The same report sent again (a new leader's relist of a Pod that still says XID 31) starts a new
// run after the last ended: it is not a second application fault.
func TestTheSameReportIsNotASecondApplicationFault(t *testing.T) {
	records := newHistoryStore()
	t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for run := range 3 {
		historyRun(t, records, t0.Add(time.Duration(run)*5*time.Minute), policy.Default(), appFault("70"), nil)
	}
	if got := records.entry("node-1", gpu0.String()); len(got.AppFaults) != 1 || got.AppFaultsTotal != 1 {
		t.Fatalf("one report sent in three runs counted as %d faults (total %d)", len(got.AppFaults), got.AppFaultsTotal)
	}
}

// releasedOnce is gpu-0's first fault at t0 under a ladder that retires at the second quarantine
// (retireAfter 2), reset and released in a run that ended: the records it left, the policy, t0 and
// the fault's report.
func releasedOnce(t *testing.T) (*historyStore, policy.Policy, time.Time, decide.Observation) {
	t.Helper()
	records := newHistoryStore()
	p := laddered()
	p.Repair.RetireAfter = 2
	t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	fail := decide.Observation{Health: device.Unhealthy, StatusVersion: "10", Reporters: []decide.Reporter{{Namespace: "ns", Pod: "p"}}}
	h, _ := historyRun(t, records, t0, p, fail, nil)
	if err := h.env.GetWorkflowError(); err != nil || len(h.released) != 1 {
		t.Fatalf("first fault: ended with %v, released %+v", err, h.released)
	}
	return records, p, t0, fail
}

// retireAfter counts across releases: the ladder resets the device and releases it, the run ends
// idle; the next fault's run, a day later, finds the closed quarantine in the record and retires
// the device as a lemon at its second quarantine (retireAfter 2) without trying a repair.
func TestALemonIsRetiredAcrossRuns(t *testing.T) {
	records, p, t0, fail := releasedOnce(t)
	if got := records.entry("node-1", gpu0.String()); len(got.Closed) != 1 || got.Closed[0].State != decide.Quarantined {
		t.Fatalf("the record after the release: %+v", got)
	}
	var retired *[]remediation.RetireInput
	fail.StatusVersion = "20"
	h, got := historyRun(t, records, t0.Add(24*time.Hour), p, fail, func(h *harness) { retired = recordRetirements(h) })
	if got.State != decide.Retired || len(*retired) != 1 || len(h.ran) != 0 {
		t.Fatalf("second fault a day later: state %s, evidence %d, checks %v; transitions %+v", got.State, len(*retired), checkKinds(h.ran), got.Transitions)
	}
}

// A device that only blinks Unknown and comes back reads and writes no record: a healthy fleet
// costs nothing.
func TestAnUnknownBlipTouchesNoRecord(t *testing.T) {
	records := newHistoryStore()
	blip := decide.Observation{Health: device.Unknown, StatusVersion: "10", Reporters: []decide.Reporter{{Namespace: "ns", Pod: "p"}}}
	h, _ := historyRun(t, records, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), policy.Default(), blip, nil)
	if err := h.env.GetWorkflowError(); err != nil || records.reads != 0 || records.writes != 0 {
		t.Fatalf("ended with %v after %d reads and %d writes of the record", err, records.reads, records.writes)
	}
}

// The record cannot be read when the fault comes: the device is fenced all the same (from this
// run's faults alone), and before the run ends the record is read again and the write keeps what
// the earlier runs left.
func TestAnUnreadRecordIsReadBeforeItIsWritten(t *testing.T) {
	records := newHistoryStore()
	t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	historyRun(t, records, t0, policy.Default(), appFault("10"), nil)
	records.failReads = 12 // more than the read before the decision tries within its minute
	h, _ := historyRun(t, records, t0.Add(10*time.Minute), policy.Default(), appFault("20"), nil)
	if err := h.env.GetWorkflowError(); err != nil {
		t.Fatalf("ended with %v", err)
	}
	if got := records.entry("node-1", gpu0.String()); len(got.AppFaults) != 2 || got.AppFaultsTotal != 2 {
		t.Fatalf("the record after a run that could not read it first: %+v", got)
	}
}

// A run that starts afresh and continues as new before any event made it read the record (a
// held device whose Pods report Healthy for hours) says so to the next run, which reads the
// record before its first fault: the lemon is retired at its second quarantine. Before, the
// next run took its carried state for one that held the history, and the closed quarantine of
// an earlier run was never counted (found by TestSimulateUnitWorkflow after 19,132 sequences).
func TestAHistoryUnreadBeforeContinueAsNewIsReadByTheNextRun(t *testing.T) {
	records, p, t0, fail := releasedOnce(t)

	// A day later: a Pod holds the device and reports Healthy; the run continues as new before
	// anything made it read the record.
	h := newHarness(0)
	h.history.entries = records.entries
	h.env.SetStartTime(t0.Add(24 * time.Hour))
	held := decide.Observation{Device: gpu0, Node: "node-1", Health: device.Healthy, StatusVersion: "20", Reporters: []decide.Reporter{{Namespace: "ns", Pod: "q"}}}
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(api.SignalObservation, held) }, time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.SetContinueAsNewSuggested(true)
		held.StatusVersion = "21"
		h.env.SignalWorkflow(api.SignalObservation, held)
	}, 2*time.Minute)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	var carried api.DeviceInput
	continuedAs(t, h.env, &carried)
	if !carried.HistoryUnread || h.history.reads != 0 {
		t.Fatalf("the run read the record %d times and carries historyUnread %v", h.history.reads, carried.HistoryUnread)
	}

	// The next run: the Pod's job crashes on the device.
	h = newHarness(0)
	h.history.entries = records.entries
	retired := recordRetirements(h)
	h.env.SetStartTime(t0.Add(25 * time.Hour))
	fail.Device, fail.Node, fail.StatusVersion, fail.Reporters = gpu0, "node-1", "22", held.Reporters
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(api.SignalObservation, fail) }, time.Second)
	got := runAnHour(h, carried)
	if got.State != decide.Retired || len(*retired) != 1 || len(h.ran) != 0 {
		t.Fatalf("the second fault, in the run after the one that did not read the record: state %s, evidence %d, checks %v; transitions %+v",
			got.State, len(*retired), checkKinds(h.ran), got.Transitions)
	}
}
