package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// resetThenReboot is a policy that resets once, then asks for a reboot of the node (its node step).
func resetThenReboot() (policy.Policy, policy.RepairStep) {
	p := laddered()
	node := policy.RepairStep{Kind: policy.RepairNode, Attempts: 1, Holders: policy.HoldersWait, Check: policy.Check{Timeout: policy.JSONDuration(10 * time.Minute)},
		Template: `{"apiVersion": "r.example.com/v1", "kind": "Reboot"}`}
	p.Repair.Steps = []policy.RepairStep{p.Repair.Steps[0], node}
	p.Repair.Steps[0].Attempts = 1
	return p, node
}

// laddered is a policy that resets twice and releases at once after a passing canary.
func laddered() policy.Policy {
	p := policy.Default()
	p.Identity = []string{"node", "index"}
	p.StabilityWindow = 0
	p.Repair = policy.Repair{Steps: []policy.RepairStep{{Kind: policy.RepairReset, Attempts: 2,
		Check: policy.Check{Image: "reset", Command: []string{"reset"}, Timeout: policy.JSONDuration(time.Minute), Namespace: policy.DefaultResetNamespace}}}}
	return p
}

// failedThenIdle reports gpu-0 Unhealthy with one Pod on it, then, a minute later, held by none.
func failedThenIdle(h *harness) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Unhealthy, StatusVersion: "10",
			Reporters: []decide.Reporter{{Namespace: "ns", Pod: "p"}}})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		// No Pod holds it: the watcher says so with a bare Healthy.
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: gpu0, Node: "node-1", Health: device.Healthy, StatusVersion: "11"})
	}, time.Minute)
}

// recordRetirements keeps every evidence bundle the workflow asks to write.
func recordRetirements(h *harness) *[]remediation.RetireInput {
	var retired []remediation.RetireInput
	h.env.OnActivity("RecordRetirement", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in remediation.RetireInput) (string, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			retired = append(retired, in)
			return "evidence", nil
		})
	return &retired
}

func checkKinds(ran []remediation.CheckInput) []decide.ActionKind {
	var out []decide.ActionKind
	for _, in := range ran {
		out = append(out, in.Kind)
	}
	return out
}

// A reset that clears the fault: the device is reset once no Pod holds it, reviewed, and released
// within minutes, with no person involved. Released and held by no Pod, its workflow then ends.
func TestLadderBringsAResetDeviceBack(t *testing.T) {
	h := newHarness(0)
	failedThenIdle(h)
	start := h.env.Now()
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: laddered()})
	if err := h.env.GetWorkflowError(); err != nil || !h.env.IsWorkflowCompleted() {
		t.Fatalf("workflow ended with %v", err)
	}
	if len(h.released) != 1 || h.releaseAttempts[0].Sub(start) > 2*time.Minute {
		t.Fatalf("released %+v at %v after the report", h.released, h.releaseAttempts)
	}
	kinds := checkKinds(h.ran)
	if len(kinds) != 3 || kinds[0] != decide.ActRepair || kinds[1] != decide.ActProbe || kinds[2] != decide.ActCanary {
		t.Fatalf("checks %v", kinds)
	}
	if r := h.ran[0]; r.Check.Image != "reset" || r.Review != 1 || r.Check.Namespace != policy.DefaultResetNamespace {
		t.Fatalf("reset input %+v", r)
	}
	if len(h.approvals) != 0 {
		t.Fatalf("a person was asked: %+v", h.approvals)
	}
}

// Every try fails: the device is Retired with its evidence written once, stays fenced, and is
// never checked again, a day or a month later.
func TestLadderRetiresADeviceNothingBringsBack(t *testing.T) {
	h := newHarness(0)
	h.checks = []decide.StepResult{{Reason: "reset exit 1"}, {Passed: true, Reason: "reset exit 0"}, {Reason: "XID 79"}}
	retired := recordRetirements(h)
	failedThenIdle(h)
	var got decide.DeviceState
	queryThenCancel(t, h.env, 31*24*time.Hour, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: laddered()})
	if got.State != decide.Retired || len(h.released) != 0 {
		t.Fatalf("state %s released %+v; transitions %+v", got.State, h.released, got.Transitions)
	}
	if kinds := checkKinds(h.ran); len(kinds) != 3 || kinds[0] != decide.ActRepair || kinds[1] != decide.ActRepair || kinds[2] != decide.ActProbe {
		t.Fatalf("checks %v: a retired device was checked again", kinds)
	}
	if len(*retired) != 1 || (*retired)[0].Evidence["try-02"] == "" || (*retired)[0].Device != gpu0 {
		t.Fatalf("evidence %+v", *retired)
	}
}

// A device quarantined retireAfter times within 30 days is retired as its rule is made: its
// evidence is written and no repair is tried.
func TestLadderRetiresALemonAtItsQuarantine(t *testing.T) {
	h := newHarness(0)
	retired := recordRetirements(h)
	p := laddered()
	p.Repair.RetireAfter = 2
	st := decide.NewState(gpu0, "node-1", p, false)
	st.Closed = []decide.QuarantineRecord{{CreatedAt: h.env.Now().Add(-24 * time.Hour)}}
	failedThenIdle(h)
	var got decide.DeviceState
	queryThenCancel(t, h.env, time.Hour, &got)
	carried, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p, State: carried})
	if got.State != decide.Retired || len(*retired) != 1 || len(h.ran) != 0 {
		t.Fatalf("state %s, evidence %d, checks %v", got.State, len(*retired), checkKinds(h.ran))
	}
	// The quarantine's rule is written knowing the last one, for the incident metrics.
	if len(h.quarantine) == 0 || !h.quarantine[0].PreviousAt.Equal(st.Closed[0].CreatedAt) {
		t.Fatalf("quarantine inputs %+v", h.quarantine)
	}
}

// A repair step asks the breaker's reset budget first; a refusal puts the try off until the
// budget allows it, and the refused try does not count.
func TestLadderWaitsForTheResetBudget(t *testing.T) {
	h := newHarness(0)
	h.resetDenials = 1
	failedThenIdle(h)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: laddered()})
	if asked := h.resetAsks; len(asked) != 2 || asked[1].Sub(asked[0]) != decide.BreakerRetry {
		t.Fatalf("reset permits asked at %v", asked)
	}
	if kinds := checkKinds(h.ran); len(kinds) != 3 || kinds[0] != decide.ActRepair || h.ran[0].Review != 1 || len(h.released) != 1 {
		t.Fatalf("checks %v, released %d", kinds, len(h.released))
	}
}

// A reset's permit is held as long as its step can run (three attempts of a check of a minute,
// each with two minutes' grace, and a minute more), not the breaker's default 15 minutes: a long
// reset keeps its place, and its end is counted.
func TestAResetPermitIsHeldForItsStep(t *testing.T) {
	h := newHarness(0)
	failedThenIdle(h)
	p := laddered()
	p.Repair.Steps[0].Check.Timeout = policy.JSONDuration(20 * time.Minute)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	want := 3*22*time.Minute + time.Minute
	if len(h.resetHolds) != 1 || h.resetHolds[0] != want {
		t.Fatalf("reset permits held for %v, want [%v]", h.resetHolds, want)
	}
}

// A ladder of a reset and then a node step: the reset does not clear the fault, so the node step
// runs, from the reboot budget, with the step's template and the try's number; the review after
// it releases the device.
func TestLadderRebootsTheNodeWhenTheResetFails(t *testing.T) {
	h := newHarness(0)
	h.checks = []decide.StepResult{{Reason: "reset exit 1: reboot fault"}}
	var asked []remediation.NodeInput
	h.env.OnActivity("RemediateNode", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in remediation.NodeInput) (decide.StepResult, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			asked = append(asked, in)
			return decide.StepResult{Passed: true, Reason: "node node-1 booted again"}, nil
		})
	p, node := resetThenReboot()
	failedThenIdle(h)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	if err := h.env.GetWorkflowError(); err != nil || len(h.released) != 1 {
		t.Fatalf("workflow ended with %v, released %+v", err, h.released)
	}
	if len(asked) != 1 || asked[0].Node != "node-1" || asked[0].Try != 2 || asked[0].Step.Template != node.Template || asked[0].Device != gpu0 || h.rebootAsks != 1 {
		t.Fatalf("node steps %+v, reboot permits %d", asked, h.rebootAsks)
	}
	if kinds := checkKinds(h.ran); len(kinds) != 3 || kinds[0] != decide.ActRepair || kinds[1] != decide.ActProbe || kinds[2] != decide.ActCanary {
		t.Fatalf("checks %v", kinds)
	}
	if h.released[0].RepairedBy != string(policy.RepairNode) {
		t.Fatalf("released as repaired by %q", h.released[0].RepairedBy)
	}
}

// A node step that moves holders: the first try finds the node's other holders, and the workflow
// moves their workloads with the policy's migration; the try a minute later joins the migration
// already started rather than starting another, finds the node free and reboots it.
func TestLadderMovesTheNodesHoldersBeforeTheReboot(t *testing.T) {
	h := newHarness(0)
	h.checks = []decide.StepResult{{Reason: "reset exit 1: reboot fault"}}
	var asked []remediation.NodeInput
	h.env.OnActivity("RemediateNode", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in remediation.NodeInput) (decide.StepResult, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			asked = append(asked, in)
			if len(asked) < 3 {
				return decide.StepResult{Busy: true, Reason: "node node-1 still runs Pod team/train", Holders: []string{"team/train-0"}}, nil
			}
			return decide.StepResult{Passed: true, Reason: "node node-1 booted again"}, nil
		})
	found, started := movedWorkloads(h)
	p := laddered()
	p.Migration = policy.DefaultMigration()
	p.Migration.Enabled = true
	node := policy.RepairStep{Kind: policy.RepairNode, Attempts: 1, Holders: policy.HoldersMove, Check: policy.Check{Timeout: policy.JSONDuration(10 * time.Minute)},
		Template: `{"apiVersion": "r.example.com/v1", "kind": "Reboot"}`}
	p.Repair.Steps = []policy.RepairStep{p.Repair.Steps[0], node}
	p.Repair.Steps[0].Attempts = 1
	failedThenIdle(h)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	if err := h.env.GetWorkflowError(); err != nil || len(h.released) != 1 {
		t.Fatalf("workflow ended with %v, released %+v", err, h.released)
	}
	// The device's own holder is looked up at the quarantine, then the node's, at each busy try.
	if len(asked) != 3 || len(*found) != 3 || (*found)[1].Pods[0] != (migration.PodRef{Namespace: "team", Name: "train-0"}) || (*found)[2].Pods[0] != (*found)[1].Pods[0] {
		t.Fatalf("node steps %d, workloads looked up %+v", len(asked), *found)
	}
	if len(*started) != 2 || (*started)[1].Workload.Name != "train" || (*started)[1].Device != gpu0 || !h.released[0].NodeFence {
		t.Fatalf("migrations started %+v; release %+v", *started, h.released[0])
	}
}

// A node step whose activity fails outright (every attempt erred after the remediator's object
// was made) clears what it left on the node: the object, its fences and the node's permit. It
// did not run, so nothing counts against the device: the same try is taken again later.
func TestANodeStepThatFailsOutrightClearsTheNode(t *testing.T) {
	h := newHarness(0)
	h.checks = []decide.StepResult{{Reason: "reset exit 1: reboot fault"}}
	h.env.OnActivity("RemediateNode", mock.Anything, mock.Anything).Return(decide.StepResult{}, errors.New("apiserver gone"))
	var ended []remediation.NodeInput
	h.env.OnActivity("EndNodeStep", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in remediation.NodeInput) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			ended = append(ended, in)
			return nil
		})
	p, node := resetThenReboot()
	failedThenIdle(h)
	var st decide.DeviceState
	queryThenCancel(t, h.env, time.Hour, &st)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	if len(ended) < 2 {
		t.Fatalf("node step ends %+v", ended)
	}
	for _, e := range ended {
		if e.Node != "node-1" || e.Try != 2 || e.TryAt.IsZero() || e.Step.Template != node.Template {
			t.Fatalf("node step ends %+v", ended)
		}
	}
	if st.State != decide.Quarantined || st.NotRun == nil || st.NotRun.Kind != decide.ActRepair || st.NotRun.Count != len(ended) {
		t.Fatalf("state %s not run %+v after %d ends", st.State, st.NotRun, len(ended))
	}
}

// A release sent as a signal to a retired device is refused: a signal is checked when it arrives,
// so one sent before the retirement would otherwise release the device the ladder gave up on. The
// command (an update, checked when accepted) still starts its review.
func TestARetiredDeviceIsNotReleasedByASignal(t *testing.T) {
	h := newHarness(0)
	h.checks = []decide.StepResult{{Reason: "reset exit 1"}, {Reason: "reset exit 1"}}
	recordRetirements(h)
	failedThenIdle(h)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(string(decide.CmdRelease), decide.Command{Actor: "alice"})
	}, 2*time.Hour)
	var got decide.DeviceState
	queryThenCancel(t, h.env, 3*time.Hour, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: laddered()})
	if got.State != decide.Retired || len(checkKinds(h.ran)) != 2 || !strings.Contains(got.LastDropped, "release signal refused: the device is retired") {
		t.Fatalf("state %s, checks %v, dropped %q", got.State, checkKinds(h.ran), got.LastDropped)
	}
}

// A node step whose node was deleted fails its try instead of waiting on the breaker every 30 s
// forever as "circuit breaker unreachable" (#52); the ladder, past its last step, retires it.
func TestANodeStepOfADeletedNodeFails(t *testing.T) {
	h := newHarness(0)
	h.nodeGone = true
	h.checks = []decide.StepResult{{Reason: "reset exit 1: reboot fault"}}
	retired := recordRetirements(h)
	p, _ := resetThenReboot()
	failedThenIdle(h)
	var st decide.DeviceState
	queryThenCancel(t, h.env, time.Hour, &st)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: p})
	if st.State != decide.Retired || h.rebootAsks != 1 || len(*retired) != 1 || !strings.Contains((*retired)[0].Evidence["try-02"], "no longer exists") {
		t.Fatalf("state %s after %d node permit asks; retired %+v", st.State, h.rebootAsks, *retired)
	}
}

// A reset whose image cannot be pulled four times, then a probe that is never scheduled: the
// tooling failed, not the device. Each is taken again later, a person hears of it once, nothing
// counts against the GPU (a ladder of two resets would have retired it), and once the tooling
// mends, the reset, probe and canary run and release it.
func TestToolingFailuresNeverRetireTheDevice(t *testing.T) {
	h := newHarness(0)
	pull := decide.StepResult{Reason: "container reset not started: ImagePullBackOff", NotRun: true}
	h.checks = []decide.StepResult{pull, pull, pull, pull, {Passed: true, Reason: "reset exit 0"},
		{Reason: "probe Pod did not start within 5m0s (phase Pending)", NotRun: true}}
	retired := recordRetirements(h)
	failedThenIdle(h)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1", Policy: laddered()})
	if err := h.env.GetWorkflowError(); err != nil || !h.env.IsWorkflowCompleted() {
		t.Fatalf("workflow ended with %v", err)
	}
	kinds := checkKinds(h.ran)
	want := []decide.ActionKind{decide.ActRepair, decide.ActRepair, decide.ActRepair, decide.ActRepair, decide.ActRepair, decide.ActProbe, decide.ActProbe, decide.ActCanary}
	if len(*retired) != 0 || len(h.released) != 1 || !slices.Equal(kinds, want) {
		t.Fatalf("retired %d, released %d, checks %v", len(*retired), len(h.released), kinds)
	}
	var told []string
	for _, a := range h.alerts {
		if strings.Contains(a.Text, "did not run") {
			told = append(told, a.Text)
		}
	}
	if len(told) != 1 || !strings.Contains(told[0], "repair of "+gpu0.String()+" did not run, 3 in a row") {
		t.Fatalf("alerts %v", told)
	}
}

// movedWorkloads answers the migration's lookups as a node whose Pod team/train-0 belongs to the
// Job team/train (any other Pod stands alone), and records the lookups and the migrations started.
func movedWorkloads(h *harness) (*[]migration.FindWorkloadsInput, *[]api.MigrateInput) {
	var found []migration.FindWorkloadsInput
	h.env.OnActivity("FindWorkloads", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in migration.FindWorkloadsInput) ([]api.Workload, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			found = append(found, in)
			if in.Pods[0].Name != "train-0" {
				return []api.Workload{{Kind: "Pod", Namespace: "ns", Name: "p", UID: "p-uid", Pods: []string{"p"}}}, nil
			}
			return []api.Workload{{Kind: "Job", Namespace: "team", Name: "train", UID: "job-uid", Pods: []string{"train-0"}}}, nil
		})
	var started []api.MigrateInput
	h.env.RegisterWorkflow(MigrateWorkflow)
	h.env.OnWorkflow("MigrateWorkflow", mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in api.MigrateInput) (migrationplan.MigrationState, error) {
			started = append(started, in)
			return migrationplan.MigrationState{}, nil
		})
	return &found, &started
}
