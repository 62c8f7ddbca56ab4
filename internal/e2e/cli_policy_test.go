//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/temporalserver/temporaltest"
)

// cliPolicyDriver is a driver only TestCLIQuarantineRunsUnderTheStacksPolicy fences: the stack's
// policy set gives it a policy of its own (cli-policy-test).
const cliPolicyDriver = "cli-policy.example.com"

// A device fenced from the command line, with no workflow yet, runs under the policy the running
// DeviceWarden holds, not the file the command was given (#52, defect 13: the workflow took the
// command line's policy, or the built-in one, and released without the approval the cluster
// requires).
func TestCLIQuarantineRunsUnderTheStacksPolicy(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	own := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(own, []byte("default:\n  quarantineLease: 15s\n  approvalRequired: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := device.ID{Driver: cliPolicyDriver, Pool: "cli-node", Device: "gpu-0"}
	out, err := runCLI(ctx, "device", "quarantine", id.String(), "--actor", "alice", "--reason", "suspected silent corruption",
		"--policy", own, "--temporal-address", shared.frontend, "--kubeconfig", shared.kubeconfig)
	if err != nil || !strings.Contains(out, "Quarantined") {
		t.Fatalf("device quarantine: %v\n%s", err, out)
	}
	var st decide.DeviceState
	if err := queryInto(ctx, shared.temporal, id.WorkflowID(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Policy.Name != "cli-policy-test" || st.Policy.QuarantineLease.D() != 2*time.Hour || !st.Policy.ApprovalRequired {
		t.Fatalf("the fence runs under policy %q (lease %s, approval required %t), not the stack's cli-policy-test (2h, true)",
			st.Policy.Name, st.Policy.QuarantineLease.D(), st.Policy.ApprovalRequired)
	}
	show, err := shared.cli(ctx, "device", "show", id.String())
	if err != nil || !strings.Contains(show, "lease 2h0m0s") || !strings.Contains(show, "approval required true") {
		t.Fatalf("device show: %v\n%s", err, show)
	}
	// The device does not exist: leave nothing behind for the tests beside this one. The run is
	// cancelled (an operator's way to stop deciding) and recorded for the replay tests: it is the
	// start that asks the worker for its policy. The watcher restarts a standing rule's workflow;
	// that run is ended too, and the rule deleted.
	d, err := shared.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), "")
	if err != nil {
		t.Fatal(err)
	}
	run := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	if err := shared.temporal.CancelWorkflow(ctx, id.WorkflowID(), run); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the run ended", func() error {
		d, err := shared.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), run)
		if err != nil {
			return err
		}
		if s := d.GetWorkflowExecutionInfo().GetStatus(); s == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return fmt.Errorf("status %s", s)
		}
		return nil
	})
	temporaltest.Record(t, ctx, shared.temporal, id.WorkflowID(), run, "device_cli_start_policy.json")
	if err := shared.kube.ResourceV1().DeviceTaintRules().Delete(ctx, id.TaintRuleName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	_ = shared.temporal.TerminateWorkflow(ctx, id.WorkflowID(), "", "test done") // a restarted run, if any
}
