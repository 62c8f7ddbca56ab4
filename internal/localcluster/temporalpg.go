package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/devicewarden/devicewarden/internal/ports"
)

// The stock Temporal server on PostgreSQL: what a fleet runs DeviceWarden against, for the tests
// and benchmarks that must not meet only the embedded server's SQLite file. Its databases are
// made, and their schemas applied, by Temporal's own SQL tool from the schema files of the
// server's module; visibility is SQL (PostgreSQL) too.

// schemaDir is where the server module's PostgreSQL schemas are copied to.
func (b *Builder) schemaDir() string { return filepath.Join(b.BinDir(), "temporal-schema") }

// copyTemporalSchema copies the server module's versioned PostgreSQL schemas into the cache.
func (b *Builder) copyTemporalSchema(ctx context.Context, dir string) error {
	server, err := b.moduleDir(ctx, dir, "go.temporal.io/server")
	if err != nil {
		return err
	}
	from := filepath.Join(server, "schema", "postgresql", "v12")
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(b.schemaDir(), path[len(from):])
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o644)
	})
}

// PGTemporal is the stock Temporal server on PostgreSQL, run by TemporalOnPostgres.
type PGTemporal struct {
	// Address is the frontend's.
	Address string
	// Metrics serves the server's Prometheus metrics (/metrics), its billable `action` counter
	// among them.
	Metrics   string
	bin, cfg  string
	namespace string
	logPath   string
	cmd       *exec.Cmd
	log       *os.File
}

// TemporalOnPostgres runs the stock Temporal server with shards history shards on pg, in dir, and
// registers namespace. It returns once the namespace is served; the server's log is
// dir/temporal-server.log.
func (b *Builder) TemporalOnPostgres(ctx context.Context, dir string, pg *Postgres, shards int, namespace string) (*PGTemporal, error) {
	if err := b.BuildTools(ctx, "temporal-server"); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, db := range []struct{ name, schema string }{{"temporal", "temporal"}, {"temporal_visibility", "visibility"}} {
		base := []string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(pg.Port), "-u", "postgres", "--db", db.name}
		for _, step := range [][]string{{"create-database"}, {"setup-schema", "-v", "0.0"},
			{"update-schema", "-d", filepath.Join(b.schemaDir(), db.schema, "versioned")}} {
			cmd := exec.CommandContext(ctx, b.Binary("temporal-sql-tool"), append(base, step...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("temporal-sql-tool %s on %s: %w: %s", step[0], db.name, err, lastLines(string(out), 20))
			}
		}
	}
	var port [10]int
	for i := range port {
		p, err := ports.Pick("127.0.0.1")
		if err != nil {
			return nil, err
		}
		port[i] = p
	}
	frontend := "127.0.0.1:" + strconv.Itoa(port[0])
	metrics := "127.0.0.1:" + strconv.Itoa(port[9])
	dyn := filepath.Join(dir, "dynamicconfig.yaml")
	// Search attributes DeviceWarden has just registered are usable at once; one partition per
	// task queue, as one process serves them.
	if err := os.WriteFile(dyn, []byte(`system.forceSearchAttributesCacheRefreshOnRead:
  - value: true
matching.numTaskqueueReadPartitions:
  - value: 1
matching.numTaskqueueWritePartitions:
  - value: 1
`), 0o644); err != nil {
		return nil, err
	}
	store := func(db string, conns int) string {
		return fmt.Sprintf(`      sql:
        pluginName: postgres12
        databaseName: %s
        connectAddr: %q
        connectProtocol: tcp
        user: postgres
        password: ""
        maxConns: %d
        maxIdleConns: %d
        maxConnLifetime: 1h
`, db, pg.Addr(), conns, conns)
	}
	cfg := fmt.Sprintf(`log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: %d
  datastores:
    default:
%s    visibility:
%sglobal:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
  metrics:
    prometheus: {framework: tally, listenAddress: %q}
services:
  frontend:
    rpc: {grpcPort: %d, httpPort: %d, membershipPort: %d, bindOnLocalHost: true}
  history:
    rpc: {grpcPort: %d, membershipPort: %d, bindOnLocalHost: true}
  matching:
    rpc: {grpcPort: %d, membershipPort: %d, bindOnLocalHost: true}
  worker:
    rpc: {grpcPort: %d, membershipPort: %d, bindOnLocalHost: true}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: %q
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: %q
  pollInterval: 10s
`, shards, store("temporal", 20), store("temporal_visibility", 4), metrics, port[0], port[1], port[2], port[3], port[4], port[5], port[6], port[7], port[8], frontend, dyn)
	cfgFile := filepath.Join(dir, "temporal-server.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	t := &PGTemporal{Address: frontend, Metrics: metrics, bin: b.Binary("temporal-server"), cfg: cfgFile, namespace: namespace, logPath: filepath.Join(dir, "temporal-server.log")}
	if err := t.Start(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// Start starts the server (again, after Stop: its state is in PostgreSQL) and waits until its
// namespace is served.
func (t *PGTemporal) Start(ctx context.Context) error {
	logf, err := os.OpenFile(t.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	t.cmd, t.log = exec.Command(t.bin, "--config-file", t.cfg, "--allow-no-auth", "start"), logf
	t.cmd.Stdout, t.cmd.Stderr = logf, logf
	if err := t.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	if err := registerNamespace(ctx, t.Address, t.namespace); err != nil {
		t.Stop()
		data, _ := os.ReadFile(t.logPath)
		return fmt.Errorf("the Temporal server on PostgreSQL: %w: %s", err, lastLines(string(data), 30))
	}
	return nil
}

// Pid is the server's process ID (0 when stopped).
func (t *PGTemporal) Pid() int {
	if t.cmd == nil || t.cmd.Process == nil {
		return 0
	}
	return t.cmd.Process.Pid
}

// Stop kills the server.
func (t *PGTemporal) Stop() {
	if t.cmd == nil {
		return
	}
	_ = t.cmd.Process.Kill()
	_ = t.cmd.Wait()
	t.log.Close()
	t.cmd = nil
}

// registerNamespace registers namespace on the server at address, once it answers, and waits
// until the namespace is served.
func registerNamespace(ctx context.Context, address, namespace string) error {
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for ; time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(500 * time.Millisecond) {
		nc, err := client.NewNamespaceClient(client.Options{HostPort: address})
		if err != nil {
			last = err
			continue
		}
		err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
		var exists *serviceerror.NamespaceAlreadyExists
		if err == nil || errors.As(err, &exists) {
			_, err = nc.Describe(ctx, namespace)
		}
		nc.Close()
		if err == nil {
			return nil
		}
		last = err
	}
	return fmt.Errorf("namespace %s not served within 2 minutes: %v", namespace, last)
}
