package workflows

import (
	"testing"

	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
)

// TestSimulateDeviceTooling runs the device simulation with checks and repair steps that do not
// run (an image not pulled, a Pod never scheduled: the tooling's failure) beside every other move,
// holding the workflow, beside the device invariants, to: no try, probe or canary counted with a
// not-run result, and no device retired for a failed ladder unless each of its steps gave a
// verdict (a node step that fails outright gives none).
func TestSimulateDeviceTooling(t *testing.T) { simulate(t, 200, toolingProperty) }

func toolingProperty(rt *rapid.T) { runDevice(rt, nil, simMode{tooling: true}) }

// checkNotRun answers a check or repair step the model says does not run: one the device's
// holder keeps from starting is busy, as ever; any other ends not run. ended is false when the
// check runs.
func (m *deviceModel) checkNotRun(env *testsuite.TestWorkflowEnvironment, attempt int32, in remediation.CheckInput) (res decide.StepResult, ended bool) {
	if m.notRuns == 0 {
		return decide.StepResult{}, false
	}
	if in.Kind == decide.ActRepair {
		if res, runs := m.stepStarts(env, attempt, breaker.Reset); !runs {
			return res, true
		}
	}
	m.notRuns--
	m.note("RunCheck %s not run", in.Kind)
	return decide.StepResult{NotRun: true, Reason: "container check not started: ImagePullBackOff"}, true
}

// checkNoVerdicts holds the device's record to the tooling's promise: nothing that did not run
// stands as a result, in the quarantine's tries, its review, the last probe or a closed record.
func (m *deviceModel) checkNoVerdicts(after string, st *decide.DeviceState) {
	counted := func(what string, r *decide.StepResult) {
		if r != nil && r.NotRun {
			m.violate("after %s: a %s that did not run is counted as a result (%s)", after, what, r.Reason)
		}
	}
	counted("probe", st.LastProbe)
	if r := st.Review; r != nil {
		counted("review's probe", r.Probe)
		counted("review's canary", r.Canary)
	}
	records := st.Closed
	if st.Quarantine != nil {
		records = append(records, *st.Quarantine)
	}
	for _, q := range records {
		if q.Ladder == nil {
			continue
		}
		for _, try := range q.Ladder.Tries {
			counted(string(try.Kind)+" try", try.Result)
		}
	}
}
