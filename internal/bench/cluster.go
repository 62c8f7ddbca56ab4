package bench

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// startCluster starts a fresh local cluster under dir and returns an admin client with the given rate limits.
func startCluster(ctx context.Context, dir, cacheDir string, out io.Writer, apiServerOnly bool, qps float32, burst int) (*localcluster.Cluster, kubernetes.Interface, error) {
	cl, err := localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(dir, "cluster"),
		Builder: &localcluster.Builder{CacheDir: cacheDir, Out: out}, Out: out, APIServerOnly: apiServerOnly})
	if err != nil {
		return nil, nil, err
	}
	cfg, err := app.KubeConfig(cl.Kubeconfig)
	if err == nil {
		cfg.QPS, cfg.Burst = qps, burst
		var kube kubernetes.Interface
		if kube, err = kubernetes.NewForConfig(cfg); err == nil {
			return cl, kube, nil
		}
	}
	_ = cl.Stop()
	return nil, nil, err
}

// stack is a fresh cluster, embedded Temporal and controller for one benchmark.
type stack struct {
	kube    kubernetes.Interface
	tc      client.Client
	cluster *localcluster.Cluster
	// temporal says where the stack's Temporal runs; temporalPids are its processes outside this
	// one (the stock server and PostgreSQL), whose CPU a benchmark adds to the control plane's.
	temporal     string
	temporalPids map[string]int
	actions      func(context.Context) (map[string]float64, error)
	// reports writes DeviceHealthReports, as a detector does.
	reports dynamic.NamespaceableResourceInterface
	// metrics are the controller's.
	metrics *metrics.Metrics
	stop    func()
}

// startStack starts a cluster, the embedded Temporal server and a controller with opts (its
// breaker made permissive unless opts sets one: every device is flipped on purpose, the cap must
// not shape what is measured). build, when set, adds to the options once the cluster's client exists.
func startStack(ctx context.Context, cacheDir string, out io.Writer, opts app.ControllerOptions, build func(kubernetes.Interface, *app.ControllerOptions)) (*stack, error) {
	return startStackOn(ctx, cacheDir, out, opts, build, 0)
}

// startStackOn is startStack whose Temporal, when pgShards > 0, is the stock server (the version
// the binary embeds) on PostgreSQL with SQL visibility and pgShards history shards, in processes
// of their own, as a fleet runs it.
func startStackOn(ctx context.Context, cacheDir string, out io.Writer, opts app.ControllerOptions, build func(kubernetes.Interface, *app.ControllerOptions), pgShards int) (st *stack, err error) {
	dir, err := os.MkdirTemp("", "devicewarden-bench-")
	if err != nil {
		return nil, err
	}
	// undo stops what was started, the last first, when a later step fails.
	undo := []func(){func() { os.RemoveAll(dir) }}
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, kube, err := startCluster(ctx, dir, cacheDir, out, false, 200, 400)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = cl.Stop() })
	tc, err := startTemporal(ctx, dir, cacheDir, out, pgShards, logger)
	if err != nil {
		return nil, err
	}
	undo = append(undo, tc.close)
	// The watcher reads detectors' reports, as the chart deploys it.
	if err := app.InstallReportCRD(ctx, kube); err != nil {
		return nil, err
	}
	if opts.Reports, err = app.ReportsClient(cl.Kubeconfig); err != nil {
		return nil, err
	}
	opts.Workers = 8
	if opts.Breaker.Window == 0 {
		opts.Breaker = breaker.Config{Window: time.Minute, MaxCount: 1 << 20}
	}
	if build != nil {
		build(kube, &opts)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	m := metrics.New()
	go func() {
		defer wg.Done()
		_ = app.RunController(runCtx, kube, tc.client, opts, m, logger)
	}()
	return &stack{kube: kube, tc: tc.client, cluster: cl, temporal: tc.where, temporalPids: tc.pids, actions: tc.actions, reports: opts.Reports, metrics: m, stop: func() {
		cancel()
		wg.Wait()
		tc.close()
		_ = cl.Stop()
		os.RemoveAll(dir)
	}}, nil
}
