package workflows

import (
	"errors"
	"testing"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// continuedAs decodes into next the input the run passed to the run after it; the test fails
// unless the run continued as new.
func continuedAs(t *testing.T, env *testsuite.TestWorkflowEnvironment, next any) {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, next); err != nil {
		t.Fatal(err)
	}
}
