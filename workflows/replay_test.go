package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestReplay replays histories recorded on the real embedded Temporal server by temporaltest.Record
// (DEVICEWARDEN_RECORD_HISTORY=$PWD/workflows/testdata make test-e2e; breaker_leases.json comes from
// go test ./worker/).
// A change that breaks determinism for running workflows fails here and needs workflow.GetVersion.
func TestReplay(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("want recorded histories for the device and breaker workflows, found %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			for name, fn := range All {
				r.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name})
			}
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
