package bench

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"

	"github.com/devicewarden/devicewarden/internal/temporalserver"
)

// TemporalChild runs the embedded Temporal server alone (SQLite file dbPath, no UI) and prints its
// frontend address as one JSON line; it runs until ctx ends. `bench watcher --watcher` runs it as
// its own process, so the server's CPU time and resident memory are its own.
func TemporalChild(ctx context.Context, dbPath string, out io.Writer) error {
	srv, err := temporalserver.Start(temporalserver.Config{DBPath: dbPath, FrontendAddress: "127.0.0.1:0", Namespace: "default",
		LogFile: filepath.Join(filepath.Dir(dbPath), "temporal-server.log")})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop() }()
	if err := json.NewEncoder(out).Encode(map[string]string{"address": srv.FrontendAddress()}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
