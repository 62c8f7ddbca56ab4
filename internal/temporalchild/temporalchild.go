// Package temporalchild starts the embedded Temporal server in a process of its own: a full
// devicewarden binary's hidden `bench temporal-child`, which prints the frontend's address as one
// JSON line. It does not link the server, so a test or a bench that only talks to the server stays
// out of the server's build graph (the race detector's unit run does not compile it).
package temporalchild

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Start runs binary's `bench temporal-child` on a fresh SQLite file under dir, with dynamic config
// settings ("key=value", as temporalserver.ParseSetting reads them), and returns the process and its
// frontend address. The process ends with ctx; the server's errors go to stderr.
func Start(ctx context.Context, binary, dir string, settings []string, stderr io.Writer) (*exec.Cmd, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	args := []string{"bench", "temporal-child", "--db", filepath.Join(dir, "temporal.db"), "--log-level", "error"}
	for _, kv := range settings {
		args = append(args, "--setting", kv)
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start temporal child: %w", err)
	}
	var hello struct{ Address string }
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &hello)
	}
	if err != nil || hello.Address == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("temporal child did not report its address: %v %q", err, line)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return cmd, hello.Address, nil
}
