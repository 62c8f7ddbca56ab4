// Package app wires DeviceWarden's parts together: Temporal (embedded or remote), the worker and the watcher.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/slackapp"
	"github.com/devicewarden/devicewarden/internal/watcher"
	"github.com/devicewarden/devicewarden/worker"
	"github.com/devicewarden/devicewarden/worker/permits"
)

// TemporalOptions says which Temporal to use. An empty Address means the embedded server.
type TemporalOptions struct {
	Address   string
	Namespace string
	TLSCert   string
	TLSKey    string
	TLSCA     string
	APIKey    string
	// Embedded server settings, used only when Address is empty.
	DBPath          string
	FrontendAddress string
	UIAddress       string
	// SuggestContinueAsNewAfter lowers the embedded server's history length for continue-as-new
	// (tests); 0 keeps the default.
	SuggestContinueAsNewAfter int
	// MetricsHandler receives the SDK's own metrics (nil: none).
	MetricsHandler client.MetricsHandler
	// Compression of requests to Temporal: "gzip", "none", or "auto" (also ""): none to a loopback
	// address (the embedded server), where it only costs CPU on both ends; gzip elsewhere.
	Compression string
}

// Temporal is a connected client and, when embedded, the server behind it.
type Temporal struct {
	Client client.Client
	Server EmbeddedServer
}

// ErrNoEmbeddedServer is what the lean build says when asked to embed Temporal.
var ErrNoEmbeddedServer = errors.New("this is the lean build (for clusters): it has no embedded Temporal server; " +
	"give --temporal-address of a Temporal frontend, or use the full build (make build) to embed one")

// EmbeddedServer is the Temporal server this process runs when no address is given. Only the
// full build has one (embed.go); the lean build for clusters (build tag lean) refuses to embed.
type EmbeddedServer interface {
	FrontendAddress() string
	// UIURL is the Web UI's address, empty when the UI is off.
	UIURL() string
	// SearchAttributesChanged makes search attributes just added usable at once.
	SearchAttributesChanged()
	Stop() error
}

// Close closes the client and stops an embedded server.
func (t *Temporal) Close() {
	t.Client.Close()
	if t.Server != nil {
		if err := t.Server.Stop(); err != nil {
			slog.Warn("stop embedded temporal", "error", err)
		}
	}
}

// ConnectTemporal starts the embedded server when no address is given and returns a client for
// it. The client connects on first use and reconnects after, so a remote Temporal that is away
// now is no error here: RunController waits for it. With the embedded server, DeviceWarden's
// search attributes are registered before it returns, so that they are usable at once.
func ConnectTemporal(ctx context.Context, o TemporalOptions, logger *slog.Logger) (*Temporal, error) {
	t := &Temporal{}
	if o.Address == "" {
		srv, err := startEmbedded(o)
		if err != nil {
			return nil, err
		}
		t.Server = srv
		o.Address = srv.FrontendAddress()
	}
	copts, err := clientOptions(o, logger)
	if err != nil {
		t.stopServer()
		return nil, err
	}
	c, err := client.NewLazyClient(copts)
	if err != nil {
		t.stopServer()
		return nil, fmt.Errorf("temporal client for %s: %w", o.Address, err)
	}
	t.Client = c
	if t.Server == nil {
		return t, nil
	}
	st := newStartup(logger.With("component", "startup"))
	if err := st.retry(ctx, "register search attributes", func(ctx context.Context) error {
		return worker.RegisterSearchAttributes(ctx, c, o.Namespace)
	}); err != nil {
		t.Close()
		return nil, fmt.Errorf("register search attributes: %w", err)
	}
	t.Server.SearchAttributesChanged()
	return t, nil
}

// Dial connects to the Temporal frontend at o.Address, failing if it does not answer within 30 s
// (for the operator commands: a person is waiting).
func Dial(ctx context.Context, o TemporalOptions, logger *slog.Logger) (client.Client, error) {
	copts, err := clientOptions(o, logger)
	if err != nil {
		return nil, err
	}
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.DialContext(dialCtx, copts)
	if err != nil {
		return nil, fmt.Errorf("dial temporal %s: %w", o.Address, err)
	}
	return c, nil
}

// clientOptions are the SDK's options for reaching o.Address.
func clientOptions(o TemporalOptions, logger *slog.Logger) (client.Options, error) {
	copts := client.Options{HostPort: o.Address, Namespace: o.Namespace, Logger: sdklog.NewStructuredLogger(logger.With("component", "temporal-sdk")),
		MetricsHandler: o.MetricsHandler}
	if o.TLSCert != "" || o.TLSCA != "" {
		tlsCfg, err := clientTLS(o)
		if err != nil {
			return copts, err
		}
		copts.ConnectionOptions.TLS = tlsCfg
	}
	if o.APIKey != "" {
		copts.Credentials = client.NewAPIKeyStaticCredentials(o.APIKey)
	}
	comp, err := grpcCompression(o.Compression, o.Address)
	if err != nil {
		return copts, err
	}
	copts.ConnectionOptions.GrpcCompression = comp
	return copts, nil
}

// grpcCompression picks the compression of requests to the frontend at address.
func grpcCompression(mode, address string) (client.GrpcCompression, error) {
	switch mode {
	case "gzip":
		return &client.GrpcCompressionGzip{}, nil
	case "none":
		return &client.GrpcCompressionNone{}, nil
	case "", "auto":
		if loopback(address) {
			return &client.GrpcCompressionNone{}, nil
		}
		return &client.GrpcCompressionGzip{}, nil
	}
	return nil, fmt.Errorf("--temporal-compression %q: want auto, gzip or none", mode)
}

// loopback reports whether host:port names this machine's loopback interface.
func loopback(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

func (t *Temporal) stopServer() {
	if t.Server != nil {
		_ = t.Server.Stop()
	}
}

func clientTLS(o TemporalOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load temporal client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("read temporal CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("temporal CA %s holds no certificate", o.TLSCA)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// KubeConfig loads a kubeconfig file, or the in-cluster config when path is empty.
func KubeConfig(path string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
				clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	// Protobuf is several times cheaper to decode than JSON for pods, which dominate the watcher.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return cfg, nil
}

// ControllerOptions configures the worker and the watcher.
type ControllerOptions struct {
	// Namespace is the Temporal namespace the client uses (default "default"); its search
	// attributes are registered at start.
	Namespace      string
	DryRun         bool
	Workers        int
	MetricsAddress string
	// MetricsListener, when set, serves the metrics and probes instead of MetricsAddress (a test
	// that binds port 0 first knows the address without a race).
	MetricsListener net.Listener
	// Policies picks each device's policy; nil means the default policy everywhere.
	Policies *policy.Set
	// Breaker caps automatic actions; the zero value means breaker.DefaultConfig().
	Breaker breaker.Config
	// HeartbeatInterval is how often an unchanged device with a workflow is re-signalled.
	HeartbeatInterval time.Duration
	// LeaderElection, when set, runs the watcher only while this replica holds the Lease.
	LeaderElection *LeaderElection
	// Slack posts notifications and approval requests; nil logs them only.
	Slack *slackapp.Notifier
	// Extra runs beside the worker and watcher until ctx ends (the simulator's kubelet in dev).
	Extra []func(context.Context) error
	// OwnNamespace is DeviceWarden's own namespace: migration Leases and evidence live there
	// (default "default").
	OwnNamespace string
	// NodePoolLabels name a node's pool: a repair ladder reboots at most --breaker-max-reboots
	// nodes of one pool at a time (empty: breaker.DefaultNodePoolLabels).
	NodePoolLabels []string
	// Hygiene is the leader's claim-hygiene scanner (zero Interval: off).
	Hygiene HygieneOptions
	// WorkflowCacheSize bounds the device workflows the worker keeps in memory between tasks
	// (worker.SetCacheSize); 0 leaves the SDK's default.
	WorkflowCacheSize int
	// Reports reads DeviceHealthReports, any detector's word about a device (nil: not read);
	// ReportRetention deletes those observed longer ago (0: kept).
	Reports         dynamic.NamespaceableResourceInterface
	ReportRetention time.Duration
	// Prometheus, when set, is read for dcgm-exporter's faults.
	Prometheus *watcher.PromConfig
}

// DefaultWorkflowCacheSize is how many device workflows a worker keeps in memory between tasks
// unless told otherwise. Measured with 10,016 live device workflows (BENCHMARKS.md): the SDK's
// default of 10,000 held them all, 1,188 MiB; 2,000 held the process at 597 MiB, and the replays on
// heartbeat signals of their short histories cost no visible worker CPU (23% of one CPU, 24% before)
// and the server 3 points. A replay costs more as a history grows ("Replays as histories grow").
const DefaultWorkflowCacheSize = 2000

// LeaderElection configures the watcher's Lease. Workers run on every replica; only the leader
// watches and signals, so two replicas never double-signal.
type LeaderElection struct {
	Namespace     string
	Name          string
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// RunController runs the worker and the watcher until ctx ends. /metrics, /healthz and /readyz
// are served from the start; what needs Temporal is started with retries (startup), so a
// Temporal that is slow or away delays the process, logged and not ready, and never ends it.
func RunController(ctx context.Context, kube kubernetes.Interface, tc client.Client, o ControllerOptions, m *metrics.Metrics, logger *slog.Logger) error {
	if o.Policies == nil {
		o.Policies = policy.DefaultSet()
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Breaker.Window == 0 {
		o.Breaker = breaker.DefaultConfig()
	}
	if err := o.Breaker.Validate(); err != nil {
		return err
	}
	if err := o.Hygiene.Validate(); err != nil {
		return err
	}
	if err := checkDomains(ctx, kube, o.Policies, logger); err != nil {
		return err
	}
	if o.WorkflowCacheSize < 0 {
		return fmt.Errorf("workflow cache size %d: must not be negative", o.WorkflowCacheSize)
	}
	if o.WorkflowCacheSize > 0 {
		worker.SetCacheSize(o.WorkflowCacheSize)
	}
	deps := worker.Deps{Kube: kube, Metrics: m, Breaker: permits.New(tc), BreakerConfig: o.Breaker,
		Nodes: &api.NodeClient{Client: tc}, Limiter: &api.LimiterClient{Client: tc}, Rollouts: &api.RolloutClient{Client: tc}, DryRun: o.DryRun, OwnNamespace: o.OwnNamespace, NodePoolLabels: o.NodePoolLabels,
		KeepLeakedClaims: !o.Hygiene.Policy.DeleteLeaked, Policies: o.Policies}
	if o.Slack != nil {
		o.Slack.Metrics = m
		deps.Alerter, deps.Approvals = o.Slack, o.Slack
	}
	acts := worker.NewActivities(deps)
	wt := watcher.New(watcher.Config{
		Kube:     kube,
		Signaler: &watcher.TemporalSignaler{Client: tc, TaskQueue: api.TaskQueue, DryRun: o.DryRun, Policies: o.Policies},
		Metrics:  m, Logger: logger.With("component", "watcher"), Workers: o.Workers, HeartbeatInterval: o.HeartbeatInterval,
		Policies: o.Policies, Alerter: deps.Alerter,
		Term:    watcher.LeaseTerm(kube, kubeobj.Own(o.OwnNamespace), watcher.TermLease),
		Reports: o.Reports, ReportRetention: o.ReportRetention, Prometheus: o.Prometheus, Nodes: deps.Nodes,
	})
	start := newStartup(logger.With("component", "startup"))
	g, gctx := errgroup.WithContext(ctx)
	ready := &readiness{watcher: wt, starting: start, leaderElected: o.LeaderElection != nil, temporal: func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	}}
	watch := func(ctx context.Context) error {
		ready.leading.Store(true)
		if m != nil {
			m.Leading.Set(1)
			defer m.Leading.Set(0)
		}
		err := wt.Run(ctx)
		ready.stopped.Store(true)
		if err != nil {
			return fmt.Errorf("watcher stopped: %w", err)
		}
		return nil
	}
	// The leader watches, frees the slots of migrations that ended without releasing them, and,
	// with claim hygiene on, scans the claims.
	lead := func(ctx context.Context) error {
		lg, lctx := errgroup.WithContext(ctx)
		lg.Go(func() error { return watch(lctx) })
		lg.Go(func() error {
			releaseGoneSlots(lctx, tc, wt.FollowsDevices, logger.With("component", "migration-limiter"))
			return nil
		})
		if o.Hygiene.Interval > 0 {
			lg.Go(func() error {
				scanClaims(lctx, acts.Hygiene.ScanClaims, tc, o.Hygiene, logger.With("component", "claim-hygiene"))
				return nil
			})
		}
		return lg.Wait()
	}
	var live liveness
	if o.LeaderElection != nil {
		live.leader = leaderelection.NewLeaderHealthzAdaptor(WatchdogTimeout)
	}
	if o.MetricsAddress != "" || o.MetricsListener != nil {
		g.Go(func() error { return serveMetrics(gctx, o.MetricsAddress, o.MetricsListener, m, live, ready, logger) })
	}
	// Only a started replica contends for the Lease: one that cannot reach Temporal would lead
	// and watch nothing.
	g.Go(func() error {
		w, err := startWorkers(gctx, start, tc, acts, o, logger)
		if err != nil {
			return nil // ctx ended while starting
		}
		defer func() {
			w.Stop()
			// Give back the permits leased ahead, so they do not count as used for a window.
			if bc, ok := deps.Breaker.(*permits.Client); ok {
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := bc.Close(cctx); err != nil {
					logger.Warn("leased permits not returned; they count as used until they leave the window", "error", err)
				}
				cancel()
			}
		}()
		start.done()
		logger.Info("started: worker running, watcher starting")
		if o.LeaderElection == nil {
			return lead(gctx)
		}
		return runAsLeader(gctx, kube, *o.LeaderElection, live.leader, lead, logger)
	})
	g.Go(func() error { pruneEvidence(gctx, acts.Migration.PruneEvidence, logger); return nil })
	for _, fn := range o.Extra {
		g.Go(func() error { return fn(gctx) })
	}
	return g.Wait()
}

// startWorkers does, with retries, what needs Temporal once at start: it answers, DeviceWarden's
// search attributes exist, the workers run and the breaker has this worker's configuration. It
// returns an error only when ctx ends first.
func startWorkers(ctx context.Context, s *startup, tc client.Client, acts *worker.Activities, o ControllerOptions, logger *slog.Logger) (*worker.Workers, error) {
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"reach temporal", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}},
		{"register search attributes", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return worker.RegisterSearchAttributes(ctx, tc, o.Namespace)
		}},
	}
	for _, st := range steps {
		s.wait(st.what)
		if err := s.retry(ctx, st.what, st.do); err != nil {
			return nil, err
		}
	}
	var w *worker.Workers
	s.wait("start worker")
	// A worker's Start is memoized by the SDK: each attempt builds new workers.
	if err := s.retry(ctx, "start worker", func(context.Context) error {
		w = worker.New(tc, acts)
		if err := w.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	s.wait("configure the breaker")
	if err := s.retry(ctx, "configure the breaker", func(ctx context.Context) error {
		return configureBreaker(ctx, tc, o.Breaker, logger)
	}); err != nil {
		w.Stop()
		return nil, err
	}
	return w, nil
}

// pruneEvidence deletes migration evidence past its keep time, at start and then hourly.
func pruneEvidence(ctx context.Context, prune func(context.Context, time.Time) (int, error), logger *slog.Logger) {
	for {
		if n, err := prune(ctx, time.Now()); err != nil && ctx.Err() == nil {
			logger.Warn("evidence not pruned", "error", err)
		} else if n > 0 {
			logger.Info("evidence past its keep time deleted", "configmaps", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Hour):
		}
	}
}

func serveMetrics(ctx context.Context, addr string, ln net.Listener, m *metrics.Metrics, live liveness, ready *readiness, logger *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", live)
	mux.Handle("/readyz", ready)
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen for metrics on %s: %w", addr, err)
		}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	logger.Info("serving metrics", "address", "http://"+ln.Addr().String()+"/metrics")
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// configureBreaker makes this worker's breaker flags the breaker's configuration (a breaker
// running code from before the configure update refuses it; requests then carry the flags).
func configureBreaker(ctx context.Context, tc client.Client, cfg breaker.Config, logger *slog.Logger) error {
	host, _ := os.Hostname()
	owner := fmt.Sprintf("worker %s (pid %d)", host, os.Getpid())
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := (&api.BreakerClient{Client: tc}).Configure(cctx, cfg, owner)
	if err != nil && strings.Contains(err.Error(), "unknown update "+api.UpdateBreakerConfigure) {
		logger.Warn("breaker predates the configure update: permit requests carry the configuration", "error", err)
		return nil
	}
	return err
}
