package temporalserver

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"
)

// RunChild runs the embedded Temporal server alone (SQLite file dbPath, no UI) and prints its
// frontend address as one JSON line; it runs until ctx ends. `bench watcher` and the tests that
// talk to a real server run it as a process of its own (internal/temporalchild), so the server's
// CPU time and memory are its own, and a test binary does not link the server.
// settings override its dynamic config (ParseSetting). For investigation,
// DEVICEWARDEN_BENCH_SERVER_CPUPROFILE=<file> makes it write a 60 s CPU profile on SIGUSR1, which
// the bench sends when the workflows start to sit.
func RunChild(ctx context.Context, dbPath string, settings map[string]any, out io.Writer) error {
	// SIGUSR1 would end the process unless it is caught; it is, with or without a profile asked for.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)
	if path := os.Getenv("DEVICEWARDEN_BENCH_SERVER_CPUPROFILE"); path != "" {
		go profileOnSignal(ctx, sig, path, time.Minute)
	}
	srv, err := Start(Config{DBPath: dbPath, FrontendAddress: "127.0.0.1:0", Namespace: "default",
		LogFile: filepath.Join(filepath.Dir(dbPath), "temporal-server.log"), Settings: settings})
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

// profileOnSignal writes a CPU profile of d to path after the first signal on sig.
func profileOnSignal(ctx context.Context, sig <-chan os.Signal, path string, d time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-sig:
	}
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	if pprof.StartCPUProfile(f) != nil {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	pprof.StopCPUProfile()
}
