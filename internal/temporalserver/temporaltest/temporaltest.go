// Package temporaltest starts the embedded Temporal server for a test: a real server on a free
// port with its SQLite file in the test's temp dir, stopped when the test ends.
package temporaltest

import (
	"log/slog"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/devicewarden/devicewarden/internal/temporalserver"
)

// Start starts a server and returns a client of its default namespace; it skips the test in
// -short mode. Both are closed when the test ends. Options set the rest of the server's Config;
// its file and address are the test's own.
func Start(t testing.TB, options ...func(*temporalserver.Config)) (*temporalserver.Server, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	cfg := temporalserver.Config{DBPath: filepath.Join(t.TempDir(), "temporal.db"), FrontendAddress: "127.0.0.1:0"}
	for _, o := range options {
		o(&cfg)
	}
	srv, err := temporalserver.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	c, err := client.Dial(client.Options{HostPort: srv.FrontendAddress(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return srv, c
}
