package temporaltest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
)

// RecordEnv names the directory Record writes into; the replay tests in package workflows read it.
const RecordEnv = "DEVICEWARDEN_RECORD_HISTORY"

// Record writes one run of a workflow's history (runID "" is the current run) as JSON into
// $DEVICEWARDEN_RECORD_HISTORY under file, the format the replay tests in package workflows read.
// Without the variable it does nothing.
func Record(t testing.TB, ctx context.Context, c client.Client, workflowID, runID, file string) {
	t.Helper()
	dir := os.Getenv(RecordEnv)
	if dir == "" {
		return
	}
	var h historypb.History
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("read history of %s: %v", workflowID, err)
		}
		h.Events = append(h.Events, ev)
	}
	data, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d events of %s", len(h.Events), workflowID)
}
