package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A device workflow started without a policy (`device quarantine` of a device that has none)
// runs under the worker's policy for its driver, not the built-in one (#52, defect 13).
func TestRunStartedWithoutPolicyTakesTheWorkers(t *testing.T) {
	set, err := policy.Parse([]byte("policies:\n  - name: cluster\n    match: {driver: " + gpu0.Driver + "}\n    quarantineLease: 2h\n    approvalRequired: true\n" +
		"drivers:\n  " + gpu0.Driver + ": {identity: [uuid]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&remediation.Activities{Policies: set})
	env.OnActivity("Quarantine", mock.Anything, mock.Anything).Return(remediation.QuarantineResult{RuleName: gpu0.TaintRuleName()}, nil).Maybe()
	env.OnActivity("Alert", mock.Anything, mock.Anything).Return(nil).Maybe()
	env.OnActivity("ReportNodeFailure", mock.Anything, mock.Anything).Return(nil).Maybe()
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(string(decide.CmdForceQuarantine), "q", &testsuite.TestUpdateCallback{OnAccept: func() {},
			OnReject: func(err error) { t.Error(err) }, OnComplete: func(any, error) {}}, decide.Command{Actor: "alice"})
	}, time.Second)
	var got decide.DeviceState
	queryThenCancel(t, env, time.Minute, &got)
	env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: gpu0, Node: "node-1"})
	if got.Policy.Name != "cluster" || got.Policy.QuarantineLease.D() != 2*time.Hour || !got.Policy.ApprovalRequired {
		t.Fatalf("policy %q, lease %s, approval %t: want the worker's", got.Policy.Name, got.Policy.QuarantineLease.D(), got.Policy.ApprovalRequired)
	}
	if got.State != decide.Quarantined {
		t.Fatalf("state %s", got.State)
	}
}
