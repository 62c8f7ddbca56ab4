package workflows

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestReplay replays histories recorded on the real embedded Temporal server by temporaltest.Record
// (DEVICEWARDEN_RECORD_HISTORY=$PWD/workflows/testdata make test-e2e; breaker_leases.json comes from
// go test ./worker/): those of this code in testdata/, and those every landed release recorded in
// testdata/releases/<commit>/, kept forever: a run a release started may still be open when its
// workers are replaced. A change that breaks determinism for running workflows fails here and
// needs workflow.GetVersion.
//
// A release's folder may hold a file named suggested that lists workflow types, one a line: the
// types whose code in that release never acted on the server's continue-as-new suggestion. Their
// histories are replayed a second time with the suggestion set at every workflow task, as a long
// run of that release (a held rollout, a migration waiting for a paused breaker) reaches this
// code: the suggestion set where its history has a timer. (A type whose code did act on it would
// itself have continued as new at such a task, so its histories are replayed as recorded.)
func TestReplay(t *testing.T) {
	files := histories(t)
	if len(files) < 3 {
		t.Fatalf("want recorded histories for the device and breaker workflows, found %v", files)
	}
	suggested := 0
	for _, f := range files {
		t.Run(strings.TrimPrefix(f, "testdata/"), func(t *testing.T) {
			hist := loadHistory(t, f)
			replay(t, f, hist)
			if suggestedTypes(t, filepath.Dir(f))[historyType(hist)] {
				suggestEverywhere(hist)
				replay(t, f+" (suggestion at every task)", hist)
				suggested++
			}
		})
	}
	if suggested == 0 {
		t.Fatal("no history was replayed with the suggestion at every task")
	}
}

// suggestedTypes reads a release folder's suggested file: the types replayed with the suggestion.
func suggestedTypes(t *testing.T, dir string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "suggested"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			if _, ok := All[line]; !ok {
				t.Fatalf("%s/suggested names %q, no workflow type", dir, line)
			}
			types[line] = true
		}
	}
	return types
}

// historyType is the workflow type a history ran.
func historyType(h *historypb.History) string {
	return h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
}

// histories lists every recorded history: this code's and every release's.
func histories(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"testdata/*.json", "testdata/releases/*/*.json"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// loadHistory reads a history file as temporaltest.Record wrote it.
func loadHistory(t *testing.T, file string) *historypb.History {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	return hist
}

// replay replays a history with every workflow type registered.
func replay(t *testing.T, name string, hist *historypb.History) {
	t.Helper()
	r := worker.NewWorkflowReplayer()
	for name, fn := range All {
		r.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name})
	}
	if err := r.ReplayWorkflowHistory(nil, hist); err != nil {
		t.Fatalf("replay %s: %v", name, err)
	}
}

// suggestEverywhere sets the server's continue-as-new suggestion on every workflow task.
func suggestEverywhere(h *historypb.History) {
	for _, e := range h.GetEvents() {
		if a := e.GetWorkflowTaskStartedEventAttributes(); a != nil {
			a.SuggestContinueAsNew = true
		}
	}
}
