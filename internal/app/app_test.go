//go:build !lean

package app

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/api"
)

// The embedded server keeps workflows across a restart (its SQLite file), and with an address
// nothing is embedded: the second connection reaches the same server.
func TestEmbeddedTemporalKeepsWorkflowsAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := TemporalOptions{Namespace: "default", DBPath: filepath.Join(t.TempDir(), "temporal.db"), FrontendAddress: "127.0.0.1:0"}

	first, err := ConnectTemporal(ctx, opts, logger)
	if err != nil {
		t.Fatal(err)
	}
	run, err := first.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "device/d/p/gpu-0", TaskQueue: api.TaskQueue},
		api.DeviceWorkflow, api.DeviceInput{})
	if err != nil {
		first.Close()
		t.Fatal(err)
	}
	first.Close()

	second, err := ConnectTemporal(ctx, opts, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	desc, err := second.Client.DescribeWorkflowExecution(ctx, "device/d/p/gpu-0", "")
	if err != nil {
		t.Fatalf("workflow lost across a restart: %v", err)
	}
	if desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() != run.GetRunID() {
		t.Fatalf("run id changed: %s", desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	}

	remote := opts
	remote.Address = second.Server.FrontendAddress()
	third, err := ConnectTemporal(ctx, remote, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if third.Server != nil {
		t.Fatal("an address was given, yet a server was embedded")
	}
	if _, err := third.Client.DescribeWorkflowExecution(ctx, "device/d/p/gpu-0", ""); err != nil {
		t.Fatalf("remote connection: %v", err)
	}
}
