// Package temporaltest starts the embedded Temporal server for a test: a real server on a free
// port with its SQLite file in the test's temp dir, stopped when the test ends. The server runs in
// a process of its own (a full devicewarden binary's `bench temporal-child`), so a test binary does
// not link it: the race detector's unit run never compiles the server, and checks the code under
// test, not the server's.
package temporaltest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/devicewarden/devicewarden/internal/temporalchild"
)

// BinaryEnv names a full devicewarden binary (make build) that runs the server. make test sets it;
// when it is unset, the first Start of a test process builds one with the go command.
const BinaryEnv = "DEVICEWARDEN_BIN"

// freshSearchAttributes makes the server read search attributes from its database on every use, so
// those a test's workers add are usable at once (its caches refresh only every 60 s).
const freshSearchAttributes = "system.forceSearchAttributesCacheRefreshOnRead=true"

// Server is a running embedded Temporal server.
type Server struct {
	address string
}

// FrontendAddress is the host:port clients dial.
func (s *Server) FrontendAddress() string { return s.address }

// SuggestContinueAsNewAfter is the setting for Start at which the server suggests that a workflow
// continue as new after n history events; tests lower it to take that path.
func SuggestContinueAsNewAfter(n int) string {
	return fmt.Sprintf("limit.historyCount.suggestContinueAsNew=%d", n)
}

// Start starts a server and returns a client of its default namespace; it skips the test in
// -short mode. Both end with the test. settings override the server's dynamic config ("key=value").
func Start(t testing.TB, settings ...string) (*Server, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "server.err"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd, address, err := temporalchild.Start(ctx, bin, dir, append([]string{freshSearchAttributes}, settings...), logFile)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		stop := time.AfterFunc(10*time.Second, cancel)
		_ = cmd.Wait()
		stop.Stop()
		cancel()
		_ = logFile.Close()
		if out, _ := os.ReadFile(logFile.Name()); t.Failed() && len(out) > 0 {
			t.Logf("the Temporal server's errors:\n%s", out)
		}
	})
	c, err := client.Dial(client.Options{HostPort: address, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &Server{address: address}, c
}

// binary is BinaryEnv's binary, or one built once per test process.
var binary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv(BinaryEnv); bin != "" {
		return bin, nil
	}
	return build()
})

// build links cmd/devicewarden (static, as make build links it, so the packages are those of the
// build cache) into the user's cache, under a name of its own and then renamed into place, so
// test processes that build at once do not write one file.
func build() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "devicewarden", "temporaltest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".devicewarden-")
	if err != nil {
		return "", err
	}
	_ = tmp.Close()
	cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", tmp.Name(), "github.com/devicewarden/devicewarden/cmd/devicewarden")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("build the devicewarden binary for the Temporal server (or set %s): %w\n%s", BinaryEnv, err, strings.TrimSpace(string(out)))
	}
	bin := filepath.Join(dir, "devicewarden")
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", err
	}
	return bin, nil
}
