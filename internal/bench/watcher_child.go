package bench

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/watcher"
)

// childStats is one line the watcher child prints.
type childStats struct {
	Synced    bool    `json:"synced"`
	PodEvents float64 `json:"podEvents"`
	Signals   float64 `json:"signals"`
	Dedup     float64 `json:"dedup"`
	// SkippedHealthy counts Healthy updates of devices without a workflow.
	SkippedHealthy float64 `json:"skippedHealthy"`
	// BaseRSSMiB is the process's resident memory before the watcher started.
	BaseRSSMiB float64 `json:"baseRSSMiB"`
	Queue      float64 `json:"queue"`
	CPUSeconds float64 `json:"cpuSeconds"`
	RSSMiB     float64 `json:"rssMiB"`
}

// countingSignaler stands in for Temporal so the child measures the watcher alone.
type countingSignaler struct{ n atomic.Int64 }

func (c *countingSignaler) Signal(context.Context, api.Observation) error {
	c.n.Add(1)
	return nil
}

func (c *countingSignaler) RunningDevices(context.Context) ([]device.ID, error) { return nil, nil }

// WatcherChild runs the watcher against a cluster and prints its counters, CPU time and resident
// memory as JSON lines every 200 ms. It runs as its own process so those figures are its own.
func WatcherChild(ctx context.Context, kubeconfig string, out io.Writer) error {
	_, baseRSS := selfUsage()
	cfg, err := app.KubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	m := metrics.New()
	sig := &countingSignaler{}
	w := watcher.New(watcher.Config{Kube: kube, Signaler: sig, Metrics: m, Workers: 4,
		HeartbeatInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var synced atomic.Bool
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	go func() {
		if w.WaitForSync(ctx) {
			synced.Store(true)
			// For investigation: DEVICEWARDEN_BENCH_HEAPPROFILE=<file> writes a heap profile 1 s after sync.
			if path := os.Getenv("DEVICEWARDEN_BENCH_HEAPPROFILE"); path != "" {
				time.Sleep(time.Second)
				runtime.GC()
				if f, err := os.Create(path); err == nil {
					_ = pprof.WriteHeapProfile(f)
					f.Close()
				}
			}
		}
	}()
	// DEVICEWARDEN_BENCH_CPUPROFILE=<file> profiles from sync until the bench stops this process
	// (SIGTERM ends ctx), so the storm is in it.
	cpuProfile := os.Getenv("DEVICEWARDEN_BENCH_CPUPROFILE")
	defer pprof.StopCPUProfile()
	enc := json.NewEncoder(out)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-tick.C:
			if cpuProfile != "" && synced.Load() {
				if err := startCPUProfile(cpuProfile); err != nil {
					return err
				}
				cpuProfile = ""
			}
			st := childStats{
				Synced:         synced.Load(),
				PodEvents:      testutil.ToFloat64(m.WatcherEvents.WithLabelValues("pod", "add")) + testutil.ToFloat64(m.WatcherEvents.WithLabelValues("pod", "update")),
				Signals:        float64(sig.n.Load()),
				Dedup:          testutil.ToFloat64(m.Deduplicated),
				SkippedHealthy: testutil.ToFloat64(m.SkippedHealthy),
				BaseRSSMiB:     baseRSS,
				Queue:          testutil.ToFloat64(m.QueueDepth),
			}
			st.CPUSeconds, st.RSSMiB = selfUsage()
			if err := enc.Encode(st); err != nil {
				return err
			}
		}
	}
}

// startCPUProfile profiles this process into path until pprof.StopCPUProfile.
func startCPUProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return pprof.StartCPUProfile(f) // the file closes with the process
}

// selfUsage returns this process's CPU seconds (user + system) and resident memory in MiB.
func selfUsage() (float64, float64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	rss := procRSSMiB("self")
	return cpu, rss
}
