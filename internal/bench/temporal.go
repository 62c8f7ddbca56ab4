package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/localcluster"
)

// stackTemporal is a benchmark stack's Temporal: its client, what it runs on, and its processes
// outside the bench process.
type stackTemporal struct {
	client client.Client
	where  string
	pids   map[string]int
	close  func()
	// actions reads the server's billable-action counter by type (nil: the embedded server,
	// which does not serve its metrics).
	actions func(context.Context) (map[string]float64, error)
}

// startTemporal starts the embedded server on a SQLite file in dir, the default; or, when
// pgShards > 0, PostgreSQL from the distribution's packages and the stock Temporal server (the
// version the binary embeds, built into cacheDir) on it with SQL visibility and pgShards history
// shards, as a fleet runs Temporal.
func startTemporal(ctx context.Context, dir, cacheDir string, out io.Writer, pgShards int, logger *slog.Logger) (*stackTemporal, error) {
	if pgShards <= 0 {
		tc, err := app.ConnectTemporal(ctx, app.TemporalOptions{Namespace: "default",
			DBPath: filepath.Join(dir, "temporal", "temporal.db"), FrontendAddress: "127.0.0.1:0"}, logger)
		if err != nil {
			return nil, err
		}
		return &stackTemporal{client: tc.Client, where: "the embedded server (SQLite)", close: tc.Close}, nil
	}
	pg, err := localcluster.StartPostgres(ctx)
	if err != nil {
		return nil, err
	}
	b := &localcluster.Builder{CacheDir: cacheDir, Out: out}
	srv, err := b.TemporalOnPostgres(ctx, filepath.Join(dir, "temporal"), pg, pgShards, "default")
	if err != nil {
		pg.Stop()
		return nil, err
	}
	tc, err := app.ConnectTemporal(ctx, app.TemporalOptions{Address: srv.Address, Namespace: "default"}, logger)
	if err != nil {
		srv.Stop()
		pg.Stop()
		return nil, err
	}
	return &stackTemporal{client: tc.Client, where: fmt.Sprintf("the stock server on PostgreSQL (%d history shards)", pgShards),
		pids: map[string]int{"temporal-server": srv.Pid(), "postgres": pg.Pid()}, actions: srv.Actions,
		close: func() {
			tc.Close()
			srv.Stop()
			pg.Stop()
		}}, nil
}
