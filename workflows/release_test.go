package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// update sends an operator update at `at` and records its outcome.
type updateOutcome struct {
	rejected error
	result   decide.CommandResult
	err      error
	done     bool
}

func (h *harness) update(at time.Duration, name string, cmd decide.Command) *updateOutcome {
	out := &updateOutcome{}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { out.rejected, out.done = err, true },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				out.done, out.err = true, err
				if r, ok := v.(decide.CommandResult); ok {
					out.result = r
				}
			},
		}, cmd)
	}, at)
	return out
}

// podLeaves is the watcher's word, at, that no Pod holds gpu0 any more: a bare Healthy. A
// review releases the device only when its sources say nothing against it (SourceProof).
func podLeaves(h *harness, at time.Duration) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Healthy, StatusVersion: "11"})
	}, at)
}

// podSaysHealthy is the watcher's word, at, that the Pod on gpu0 reports it Healthy again.
func podSaysHealthy(h *harness, at time.Duration) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Healthy, StatusVersion: "11",
			Reporters: []decide.Reporter{{Pod: "p", Health: device.Healthy}}})
	}, at)
}

func TestReleaseAfterLeaseReview(t *testing.T) {
	h := newHarness(0)
	p := policy.Default()
	p.Identity = []string{"node", "index"}
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: "10",
			DeviceClass: "gpu.example.com", Reporters: []decide.Reporter{{Pod: "p"}}})
	}, time.Second)
	podSaysHealthy(h, 24*time.Hour+25*time.Minute) // within the heartbeat limit of the release
	var got decide.DeviceState
	queryThenCancel(t, h.env, 24*time.Hour+32*time.Minute, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	if got.State != decide.Released || len(got.Closed) != 1 {
		t.Fatalf("state %s, closed %+v; transitions %+v", got.State, got.Closed, got.Transitions)
	}
	if len(h.ran) != 2 || h.ran[0].Kind != decide.ActProbe || h.ran[1].Kind != decide.ActCanary {
		t.Fatalf("checks %+v", h.ran)
	}
	if in := h.ran[0]; in.DeviceClass != "gpu.example.com" || in.Review != 1 || strings.Join(in.Identity, ",") != "node,index" {
		t.Fatalf("probe input %+v", in)
	}
	if len(h.refreshed) != 1 || h.refreshed[0].Key != decide.TaintProbation {
		t.Fatalf("refresh calls %+v", h.refreshed)
	}
	if len(h.released) != 1 || !h.released[0].FirstReviewPassed || h.released[0].QuarantinedAt.IsZero() {
		t.Fatalf("release calls %+v", h.released)
	}
}

func TestFailedProbeRefusesReleaseUpdate(t *testing.T) {
	h := newHarness(0)
	h.checks = []decide.StepResult{{Reason: "XID 79 again"}}
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: "10",
			Reporters: []decide.Reporter{{Pod: "p"}}})
	}, time.Second)
	first := h.update(time.Minute, string(decide.CmdRelease), decide.Command{Actor: "alice", Reason: "reseated"})
	second := h.update(2*time.Minute, string(decide.CmdRelease), decide.Command{Actor: "alice"})
	noActor := h.update(3*time.Minute, string(decide.CmdExtend), decide.Command{Duration: policy.JSONDuration(time.Hour)})
	var got decide.DeviceState
	queryThenCancel(t, h.env, 4*time.Minute, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	if first.rejected != nil || first.err != nil || first.result.State != decide.Quarantined || !strings.Contains(first.result.Message, "probe failed") {
		t.Fatalf("first release: %+v", first)
	}
	if second.rejected == nil || !strings.Contains(second.rejected.Error(), "last probe failed") {
		t.Fatalf("second release not refused: %+v", second)
	}
	if noActor.rejected == nil || !strings.Contains(noActor.rejected.Error(), "actor is required") {
		t.Fatalf("extend without actor not refused: %+v", noActor)
	}
	if got.State != decide.Quarantined || got.ReviewInterval.D() != 48*time.Hour || got.LastProbe == nil || got.LastProbe.Passed {
		t.Fatalf("after failed probe: %+v", got)
	}
	if len(h.refreshed) != 1 || h.refreshed[0].Key != decide.TaintQuarantine || !h.refreshed[0].ExpiresAt.Equal(got.Quarantine.ExpiresAt) {
		t.Fatalf("expiry not written on the rule: %+v", h.refreshed)
	}
	// The rule keeps the quarantine's reason; the failed review is in the transitions.
	if h.refreshed[0].Reason != got.Quarantine.Reason || h.refreshed[0].Actor != decide.Actor {
		t.Fatalf("refresh reason %q actor %q, quarantine reason %q", h.refreshed[0].Reason, h.refreshed[0].Actor, got.Quarantine.Reason)
	}
}

func TestMalformedSignalIsDroppedAndTheWorkflowGoesOn(t *testing.T) {
	h := newHarness(0)
	report := func(at time.Duration, hl device.Health, ver string) {
		h.env.RegisterDelayedCallback(func() {
			h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: hl, StatusVersion: ver,
				Reporters: []decide.Reporter{{Pod: "p"}}})
		}, at)
	}
	report(time.Second, device.Unknown, "9")
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalExtend, map[string]any{"actor": "bob", "duration": []int{1}})
	}, 2*time.Second)
	report(3*time.Second, device.Unhealthy, "10")
	var got decide.DeviceState
	queryThenCancel(t, h.env, time.Minute, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	if got.State != decide.Quarantined || len(h.quarantine) != 1 {
		t.Fatalf("Unhealthy after a malformed signal: state %s, quarantines %d", got.State, len(h.quarantine))
	}
	if got.Dropped != 1 || !strings.Contains(got.LastDropped, "does not decode") {
		t.Fatalf("dropped %d %q", got.Dropped, got.LastDropped)
	}
}

func TestRuleDeletedByHandIsRecordedAndReplaced(t *testing.T) {
	h := newHarness(0)
	obs := func(at time.Duration, ver string) {
		h.env.RegisterDelayedCallback(func() {
			h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: ver,
				Reporters: []decide.Reporter{{Pod: "p"}}})
		}, at)
	}
	obs(time.Second, "10")
	h.env.RegisterDelayedCallback(func() { h.rule = decide.RuleInfo{Name: "r", Actor: "kubectl-client-side-apply"} }, time.Minute)
	obs(2*time.Minute, "11")
	var got decide.DeviceState
	queryThenCancel(t, h.env, 3*time.Minute, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	if got.State != decide.Quarantined || len(h.quarantine) != 2 {
		t.Fatalf("state %s, quarantine calls %d", got.State, len(h.quarantine))
	}
	if len(got.Closed) != 1 || got.Closed[0].ClosedBy != "kubectl-client-side-apply" {
		t.Fatalf("closed %+v", got.Closed)
	}
}

func TestApprovalByUpdate(t *testing.T) {
	h := newHarness(0)
	p := policy.Default()
	p.ApprovalRequired = true
	p.StabilityWindow = policy.JSONDuration(time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: "10",
			Reporters: []decide.Reporter{{Pod: "p"}}})
	}, time.Second)
	podSaysHealthy(h, 90*time.Second)
	early := h.update(time.Minute, string(decide.CmdApprove), decide.Command{Actor: "U1"})
	h.update(2*time.Minute, string(decide.CmdRelease), decide.Command{Actor: "alice"})
	approve := h.update(10*time.Minute, string(decide.CmdApprove), decide.Command{Actor: "U1"})
	var got decide.DeviceState
	queryThenCancel(t, h.env, 11*time.Minute, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	if early.rejected == nil {
		t.Fatal("approve before a review was accepted")
	}
	if approve.rejected != nil || approve.result.State != decide.Released || len(h.approvals) != 1 || len(h.released) != 1 {
		t.Fatalf("approve %+v, approvals %d, released %d", approve, len(h.approvals), len(h.released))
	}
	if got.Closed[0].ClosedBy != "U1" {
		t.Fatalf("closed by %q", got.Closed[0].ClosedBy)
	}
	// The request people see carries the evidence: probe and canary outcomes and the review.
	req := h.approvals[0]
	if req.Probe == nil || !req.Probe.Passed || req.Canary == nil || !req.Canary.Passed || !strings.Contains(req.Summary, "canary passed") ||
		req.Reason != "device reported Unhealthy" || req.Node != "node-1" || req.WorkflowID == "" {
		t.Fatalf("approval request %+v", req)
	}
}

func TestRecordKeepsTheEffectTheWorkerApplied(t *testing.T) {
	h := newHarness(0)
	h.appliedEffect = "None" // a worker running with --dry-run answers with effect None
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: "10",
			Reporters: []decide.Reporter{{Pod: "p"}}})
	}, time.Second)
	var got decide.DeviceState
	queryThenCancel(t, h.env, time.Minute, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: policy.Default()})
	if got.Quarantine == nil || got.Quarantine.Effect != "None" {
		t.Fatalf("record %+v", got.Quarantine)
	}
}
