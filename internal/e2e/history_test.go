package e2e

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

// recordHistory writes a workflow's history as JSON into $DEVICEWARDEN_RECORD_HISTORY, the format
// the replay tests in package workflows read. Without the variable it does nothing.
func recordHistory(t *testing.T, ctx context.Context, tc client.Client, workflowID, file string) {
	t.Helper()
	dir := os.Getenv("DEVICEWARDEN_RECORD_HISTORY")
	if dir == "" {
		return
	}
	var h historypb.History
	it := tc.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("read history: %v", err)
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
