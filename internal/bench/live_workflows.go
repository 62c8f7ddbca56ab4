package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/temporalchild"
)

// startTemporalChild starts `bench temporal-child` (this binary, the full flavour) on a fresh
// SQLite file under dir and returns it with its frontend address.
func startTemporalChild(ctx context.Context, dir string, settings []string) (*exec.Cmd, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	return temporalchild.Start(ctx, self, dir, settings, os.Stderr)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// liveWorkflows measures the embedded server (its own process) while the storm's device
// workflows run: how long until all n run, its CPU and memory while they sit on timers (the
// watcher's heartbeat still signals each every 2 minutes), the SQLite files, and the latency of
// operator commands run by the lean binary meanwhile.
func liveWorkflows(ctx context.Context, out io.Writer, server, watcher *exec.Cmd, address, dbDir, lean string, n int, stormStart time.Time, sample string, sit time.Duration) error {
	tc, err := app.Dial(ctx, app.TemporalOptions{Address: address, Namespace: "default"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer tc.Close()
	count := func(query string) (int64, error) {
		resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: query})
		if err != nil {
			return 0, err
		}
		return resp.GetCount(), nil
	}
	deadline := time.Now().Add(20 * time.Minute)
	for {
		c, err := count(api.RunningDevicesQuery)
		if err != nil {
			return err
		}
		if c >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d device workflows running after 20 minutes", c, n)
		}
		time.Sleep(time.Second)
	}
	startedIn := time.Since(stormStart)
	fmt.Fprintf(out, "[bench] %d device workflows running %s after the storm's first write\n", n, startedIn.Round(time.Second))

	// The workflows sit for sit (by default one heartbeat round: the watcher re-signals every device
	// workflow once in it) with nothing else running, so the CPU figures are what they cost; minute
	// by minute too, which shows a cost that grows with their histories. Then operator commands run
	// for 2 minutes, whose latency is measured and whose queries the server serves too.
	s0, w0 := procCPU(server.Process.Pid), procCPU(watcher.Process.Pid)
	_ = server.Process.Signal(syscall.SIGUSR1) // profiles the server when the bench asks (see TemporalChild)
	for at := time.Duration(0); at < sit && ctx.Err() == nil; at += time.Minute {
		step := min(time.Minute, sit-at)
		sa, wa := procCPU(server.Process.Pid), procCPU(watcher.Process.Pid)
		sleep(ctx, step)
		sb, wb := procCPU(server.Process.Pid), procCPU(watcher.Process.Pid)
		fmt.Fprintf(out, "[bench] sitting, minute %d: server %.1f%% of one CPU, lean watcher+worker %.1f%%\n",
			at/time.Minute+1, 100*(sb-sa).Seconds()/step.Seconds(), 100*(wb-wa).Seconds()/step.Seconds())
	}
	s1, w1 := procCPU(server.Process.Pid), procCPU(watcher.Process.Pid)
	serverRSS, watcherRSS := procRSSMiB(fmt.Sprint(server.Process.Pid)), procRSSMiB(fmt.Sprint(watcher.Process.Pid))
	const commands = 2 * time.Minute
	lat := operatorLatency(ctx, lean, address, sample, commands)
	s2, w2 := procCPU(server.Process.Pid), procCPU(watcher.Process.Pid)
	var dbBytes int64
	files, _ := filepath.Glob(filepath.Join(dbDir, "temporal.db*"))
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			dbBytes += st.Size()
		}
	}
	share := func(from, to, over time.Duration) float64 { return 100 * (to - from).Seconds() / over.Seconds() }
	fmt.Fprintf(out, "embedded server with %d live device workflows: started %s after the storm's first write (%.0f/s); "+
		"while they sit (%s): server %.1f%% of one CPU, RSS %.0f MiB; lean watcher+worker %.1f%% of one CPU, RSS %.0f MiB; "+
		"with operator commands running (%s): server %.1f%%, lean %.1f%%; SQLite %.1f MB\n",
		n, startedIn.Round(time.Second), float64(n)/startedIn.Seconds(), sit,
		share(s0, s1, sit), serverRSS, share(w0, w1, sit), watcherRSS, commands, share(s1, s2, commands), share(w1, w2, commands), float64(dbBytes)/1e6)
	if runs, err := count("WorkflowType = 'DeviceWorkflow' AND ExecutionStatus = 'ContinuedAsNew'"); err == nil {
		fmt.Fprintf(out, "device workflow runs continued as new while they ran: %d\n", runs)
	}
	if id, err := device.ParseID(sample); err == nil {
		if d, err := tc.DescribeWorkflowExecution(ctx, id.WorkflowID(), ""); err == nil {
			fmt.Fprintf(out, "the history of %s's current run: %d events\n", sample, d.GetWorkflowExecutionInfo().GetHistoryLength())
		}
	}
	for _, l := range lat {
		fmt.Fprintln(out, l)
	}
	return nil
}

// operatorLatency runs operator commands with the lean binary, round after round, for about d,
// and returns one line per command: runs, p50, p99 and max wall-clock time (process start included).
func operatorLatency(ctx context.Context, lean, address, sample string, d time.Duration) []string {
	cmds := [][]string{
		{"device", "show", sample},
		{"breaker", "status"},
		{"device", "list", "--state", "Restricted"},
	}
	took := make([][]time.Duration, len(cmds))
	failed := make([]int, len(cmds))
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		for i, args := range cmds {
			start := time.Now()
			err := exec.CommandContext(ctx, lean, append(args, "--temporal-address", address, "--log-level", "error")...).Run()
			if err != nil {
				failed[i]++
				continue
			}
			took[i] = append(took[i], time.Since(start))
		}
	}
	var lines []string
	for i, args := range cmds {
		t := took[i]
		if len(t) == 0 {
			lines = append(lines, fmt.Sprintf("operator command `%v`: every run failed (%d)", args, failed[i]))
			continue
		}
		slices.Sort(t)
		p99 := t[min(len(t)-1, len(t)*99/100)]
		lines = append(lines, fmt.Sprintf("operator command `devicewarden %v` while they run: %d runs, p50 %s, p99 %s, max %s, failed %d",
			args, len(t), t[len(t)/2].Round(time.Millisecond), p99.Round(time.Millisecond), t[len(t)-1].Round(time.Millisecond), failed[i]))
	}
	return lines
}
