package bench

import (
	"context"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// startRun starts bin's `run` (the lean flavour, as a cluster runs it) against kubeconfig and the
// Temporal frontend at address, and reports what its /readyz and /metrics say, with its CPU time
// and resident memory from /proc, every 200 ms.
func startRun(ctx context.Context, bin, kubeconfig, address, stateDir, policyFile string, extra ...string) (*exec.Cmd, <-chan childStats, error) {
	cmd, metricsAddr, err := runProcess(ctx, bin, kubeconfig, stateDir, append([]string{"--temporal-address", address, "--policy", policyFile}, extra...)...)
	if err != nil {
		return nil, nil, err
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	base := 0.0
	ch := make(chan childStats, 16)
	go func() {
		defer close(ch)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rss := procRSSMiB(pid)
			if rss == 0 {
				return // exited
			}
			if base == 0 {
				base = rss // the first look, before the sources are listed
			}
			s, err := scrape(metricsAddr)
			if err != nil {
				continue // not serving yet
			}
			s.BaseRSSMiB, s.RSSMiB, s.CPUSeconds = base, rss, procCPU(cmd.Process.Pid).Seconds()
			select {
			case ch <- s:
			default:
			}
		}
	}()
	return cmd, ch, nil
}

// scrape reads the watcher's counters from a run process's /metrics and /readyz.
func scrape(addr string) (childStats, error) {
	var s childStats
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return s, err
	}
	sum := func(name string, match func(*dto.Metric) bool) float64 {
		total := 0.0
		if f := fams[name]; f != nil {
			for _, m := range f.GetMetric() {
				if match != nil && !match(m) {
					continue
				}
				total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return total
	}
	label := func(name, value string) func(*dto.Metric) bool {
		return func(m *dto.Metric) bool {
			for _, l := range m.GetLabel() {
				if l.GetName() == name {
					return l.GetValue() == value
				}
			}
			return false
		}
	}
	pod := label("kind", "pod")
	addOrUpdate := func(m *dto.Metric) bool { return pod(m) && (label("action", "add")(m) || label("action", "update")(m)) }
	s.PodEvents = sum("devicewarden_watcher_events_total", addOrUpdate)
	s.Signals = sum("devicewarden_watcher_signals_total", label("result", "ok"))
	s.Dedup = sum("devicewarden_watcher_deduplicated_total", nil)
	s.SkippedHealthy = sum("devicewarden_watcher_skipped_healthy_total", nil)
	s.Queue = sum("devicewarden_watcher_queue_depth", nil)
	s.Synced = isReady(&client, addr)
	return s, nil
}
