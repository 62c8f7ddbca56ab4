//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/internal/temporalserver/temporaltest"
)

// recordHistory writes a workflow's history as JSON into $DEVICEWARDEN_RECORD_HISTORY, the format
// the replay tests in package workflows read. Without the variable it does nothing.
func recordHistory(t *testing.T, ctx context.Context, tc client.Client, workflowID, file string) {
	t.Helper()
	temporaltest.Record(t, ctx, tc, workflowID, "", file)
}

// recordRuns records every run of a workflow, oldest first, as <prefix>_<n>.json (replacing the
// files of an earlier recording).
func recordRuns(t *testing.T, ctx context.Context, tc client.Client, workflowID, prefix string) {
	t.Helper()
	dir := os.Getenv(temporaltest.RecordEnv)
	if dir == "" {
		return
	}
	old, _ := filepath.Glob(filepath.Join(dir, prefix+"_[0-9]*.json"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	for i, run := range runIDs(t, ctx, tc, workflowID) {
		temporaltest.Record(t, ctx, tc, workflowID, run, fmt.Sprintf("%s_%d.json", prefix, i+1))
	}
}

// runIDs lists a workflow's runs, oldest first, following each run back to the one it continued.
func runIDs(t *testing.T, ctx context.Context, tc client.Client, workflowID string) []string {
	t.Helper()
	d, err := tc.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		t.Fatalf("describe %s: %v", workflowID, err)
	}
	runs := []string{d.GetWorkflowExecutionInfo().GetExecution().GetRunId()}
	for {
		it := tc.GetWorkflowHistory(ctx, workflowID, runs[0], false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s run %s: %v", workflowID, runs[0], err)
		}
		prev := ev.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if prev == "" {
			return runs
		}
		runs = append([]string{prev}, runs...)
	}
}
