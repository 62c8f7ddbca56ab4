//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/cli"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// childEnv carries a child controller's settings: the test binary, run again with it set, is a
// controller process (worker and watcher) that a test can SIGKILL.
const childEnv = "DEVICEWARDEN_E2E_CONTROLLER"

type childConfig struct {
	Kubeconfig string `json:"kubeconfig"`
	Temporal   string `json:"temporal"`
	Workers    int    `json:"workers"`
	// Policy is a policy file's text (default: the built-in policy).
	Policy string `json:"policy,omitempty"`
	// Hygiene turns the claim-hygiene scanner on.
	Hygiene *app.HygieneOptions `json:"hygiene,omitempty"`
}

// runChild is the child process: a controller until it is killed or told to stop.
func runChild(raw string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	kube, err := kubeClient(c.Kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tc, err := app.ConnectTemporal(ctx, app.TemporalOptions{Address: c.Temporal, Namespace: "default"}, testLogger)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tc.Close()
	opts := app.ControllerOptions{Workers: c.Workers, Breaker: breaker.Config{Window: time.Minute, MaxCount: 1000}}
	if c.Hygiene != nil {
		opts.Hygiene = *c.Hygiene
	}
	if c.Policy != "" {
		if opts.Policies, err = policy.Parse([]byte(c.Policy)); err != nil {
			fmt.Fprintln(os.Stderr, "child policy:", err)
			return 2
		}
	}
	if err := app.RunController(ctx, kube, tc.Client, opts, metrics.New(), testLogger); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}
	return 0
}

// child is a controller running in its own process.
type child struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

// startChild runs a controller process against the stack; its output goes to a file in dir.
func startChild(t *testing.T, s *stack, dir, name string) *child {
	t.Helper()
	return startChildWith(t, s, dir, name, "")
}

// startChildWith runs a controller process with a policy file's text.
func startChildWith(t *testing.T, s *stack, dir, name, policyText string) *child {
	t.Helper()
	return startChildConfig(t, s, dir, name, childConfig{Policy: policyText})
}

// startChildConfig runs a controller process configured by c (its cluster and Temporal are the
// stack's).
func startChildConfig(t *testing.T, s *stack, dir, name string, cfg childConfig) *child {
	t.Helper()
	cfg.Kubeconfig, cfg.Temporal, cfg.Workers = s.kubeconfig, s.frontend, 8
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return startProcess(t, dir, name, childEnv+"="+string(raw))
}

// startProcess runs this test binary again as a child process with env set; its output goes to
// a file in dir, shown if the test fails.
func startProcess(t *testing.T, dir, name, env string) *child {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		c.kill(t)
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("%s output:\n%s", name, tail(string(data), 4000))
		}
	})
	return c
}

// cliEnv runs the child as the devicewarden binary does, with the JSON array of arguments it
// holds: the real `dev` and `run` commands, in a process a test can SIGKILL or interrupt.
const cliEnv = "DEVICEWARDEN_E2E_CLI"

// runCLIChild is the child process of cliEnv: main.go's body.
func runCLIChild(raw string) int {
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, "cli args:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Execute(ctx, args)
}

// startCLI runs devicewarden with args in a child process.
func startCLI(t *testing.T, dir, name string, args ...string) *child {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return startProcess(t, dir, name, cliEnv+"="+string(raw))
}

// interrupt sends SIGINT (Ctrl-C) and waits for the process to exit; it returns the exit code.
func (c *child) interrupt(t *testing.T) int {
	t.Helper()
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		t.Fatalf("child %d did not stop on SIGINT", c.cmd.Process.Pid)
	}
	return c.cmd.ProcessState.ExitCode()
}

// exited reports whether the process has ended, and how.
func (c *child) exited() (bool, string) {
	select {
	case err := <-c.done:
		c.done <- err
		return true, fmt.Sprint(err)
	default:
		return false, ""
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("child %d did not die", c.cmd.Process.Pid)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
