package localcluster

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A stopped build interrupts its go command rather than killing it, so the go command removes its
// work directory (a killed one leaves it in the temporary directory).
func TestAStoppedBuildInterruptsTheGoCommand(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "interrupted")
	// A stand-in for the go command: says it started, then waits; on SIGINT it leaves a mark.
	fake := filepath.Join(dir, "go")
	script := "#!/bin/sh\ntrap 'echo > " + marker + "; exit 1' INT\necho started > " + filepath.Join(dir, "started") + "\nwhile :; do sleep 0.05; done\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &Builder{GoBin: fake, Out: io.Discard}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.run(ctx, "test", b.goCmd(ctx, dir, "build")) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in go command never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the build did not stop")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the go command was not interrupted (killed instead?): %v", err)
	}
}
