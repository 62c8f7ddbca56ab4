package temporalserver

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

func echo(_ workflow.Context, s string) (string, error) { return s, nil }

// runWorkflow runs one workflow to completion on srv through a worker of its own.
func runWorkflow(t *testing.T, srv *Server, within time.Duration) {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: srv.FrontendAddress()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := worker.New(c, "restart-test", worker.Options{})
	w.RegisterWorkflowWithOptions(echo, workflow.RegisterOptions{Name: "echo"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "restart-test"}, "echo", "x")
	if err == nil {
		err = run.Get(ctx, nil)
	}
	if err != nil {
		t.Fatalf("workflow on the server: %v", err)
	}
}

// A server started again on its file right after a stop serves at once. Before the previous
// process's membership rows were forgotten, its matching service spent its first ring bootstrap
// (about 40 s) trying to join the stopped process, and this workflow took 57 s.
func TestServesRightAfterARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	cfg := Config{DBPath: filepath.Join(t.TempDir(), "temporal.db"), FrontendAddress: "127.0.0.1:0"}
	first, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runWorkflow(t, first, time.Minute)
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	second, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	// Well under the 40 s a ring bootstrap that waits on a dead member takes.
	runWorkflow(t, second, 20*time.Second)
}

// Two servers never share one file: the second is refused while the first runs, and starts once
// the first has stopped.
func TestOneServerPerFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	cfg := Config{DBPath: filepath.Join(t.TempDir(), "temporal.db"), FrontendAddress: "127.0.0.1:0"}
	first, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := Start(cfg); !errors.Is(err, ErrStateInUse) {
		if second != nil {
			_ = second.Stop()
		}
		_ = first.Stop()
		t.Fatalf("a second server on the same file: %v, want %v", err, ErrStateInUse)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	again, err := Start(cfg)
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	_ = again.Stop()
}
