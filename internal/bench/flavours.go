package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devicewarden/devicewarden/internal/app"
)

// FlavoursOptions configures the comparison of the full and the lean binary.
type FlavoursOptions struct {
	Full, Lean string // paths of the two binaries
	Runs       int
	Idle       time.Duration // how long each process runs ready before its memory is read again
	CacheDir   string
	Out        io.Writer
}

// Flavours starts each binary's `run` Runs times against one local apiserver and one Temporal
// server, and prints its size, the time from exec until /readyz answers 200, and its resident
// memory then and after Idle. The full binary is also run the way `make dev` runs it, embedding
// Temporal.
func Flavours(ctx context.Context, o FlavoursOptions) error {
	dir, err := os.MkdirTemp("", "devicewarden-bench-flavours-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cl, _, err := startCluster(ctx, dir, o.CacheDir, o.Out, true, 50, 100)
	if err != nil {
		return err
	}
	defer func() { _ = cl.Stop() }()
	tc, err := app.ConnectTemporal(ctx, app.TemporalOptions{Namespace: "default",
		DBPath: filepath.Join(dir, "temporal", "temporal.db"), FrontendAddress: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer tc.Close()
	external := []string{"--temporal-address", tc.Server.FrontendAddress()}
	embedded := []string{"--temporal-listen", "127.0.0.1:0", "--ui-listen", ""}
	fmt.Fprintf(o.Out, "\n%d runs each; `run` against a local kube-apiserver, no pods; %s idle after ready\n\n", o.Runs, o.Idle)
	fmt.Fprintln(o.Out, "| flavour | Temporal | binary MB | exec to /readyz p50 (max) | RSS at ready MiB p50 (max) | RSS after idle MiB p50 (max) |")
	fmt.Fprintln(o.Out, "| --- | --- | --- | --- | --- | --- |")
	for _, f := range []struct {
		name, path, temporal string
		args                 []string
	}{
		{"full", o.Full, "external", external},
		{"lean", o.Lean, "external", external},
		{"full", o.Full, "embedded (SQLite)", embedded},
	} {
		st, err := os.Stat(f.path)
		if err != nil {
			return err
		}
		var ready []time.Duration
		var rss, idle []float64
		for i := 0; i < o.Runs; i++ {
			r, err := startOnce(ctx, f.path, cl.Kubeconfig, filepath.Join(dir, fmt.Sprintf("%s-%d", f.name, i)), o.Idle, f.args)
			if err != nil {
				return fmt.Errorf("%s (%s): %w", f.path, f.temporal, err)
			}
			ready, rss, idle = append(ready, r.ready), append(rss, r.rss), append(idle, r.idle)
		}
		fmt.Fprintf(o.Out, "| %s | %s | %.1f | %s (%s) | %.1f (%.1f) | %.1f (%.1f) |\n", f.name, f.temporal, float64(st.Size())/1e6,
			p50(ready).Round(time.Millisecond), slices.Max(ready).Round(time.Millisecond), p50(rss), slices.Max(rss), p50(idle), slices.Max(idle))
	}
	return nil
}

type startFigures struct {
	ready     time.Duration
	rss, idle float64
}

// startOnce runs one `run` process until it is ready and has idled, then stops it with SIGTERM.
func startOnce(ctx context.Context, bin, kubeconfig, stateDir string, idle time.Duration, args []string) (startFigures, error) {
	start := time.Now()
	cmd, metricsAddr, err := runProcess(ctx, bin, kubeconfig, stateDir, args...)
	if err != nil {
		return startFigures{}, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	deadline := start.Add(2 * time.Minute)
	for !isReady(http.DefaultClient, metricsAddr) {
		if time.Now().After(deadline) {
			return startFigures{}, fmt.Errorf("not ready after 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	f := startFigures{ready: time.Since(start), rss: procRSSMiB(strconv.Itoa(cmd.Process.Pid))}
	select {
	case <-time.After(idle):
	case <-ctx.Done():
		return f, ctx.Err()
	}
	f.idle = procRSSMiB(strconv.Itoa(cmd.Process.Pid))
	return f, nil
}

// runProcess starts bin's `run` against kubeconfig, with its metrics and probes on a free loopback
// address, claim hygiene off and errors only logged; extra adds flags. It returns the process and
// that address.
func runProcess(ctx context.Context, bin, kubeconfig, stateDir string, extra ...string) (*exec.Cmd, string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	metricsAddr := l.Addr().String()
	l.Close()
	cmd := exec.CommandContext(ctx, bin, append([]string{"run", "--kubeconfig", kubeconfig, "--metrics-address", metricsAddr,
		"--state-dir", stateDir, "--hygiene-interval", "0", "--log-level", "error"}, extra...)...)
	cmd.Env = withoutEnv(os.Environ(), "KUBERNETES_SERVICE_HOST")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s run: %w", bin, err)
	}
	return cmd, metricsAddr, nil
}

// isReady says whether the run process serving at addr answers /readyz with 200.
func isReady(client *http.Client, addr string) bool {
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// procRSSMiB is a process's resident memory ("self" or a PID) from /proc, 0 when unreadable.
func procRSSMiB(pid string) float64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}
