// Package temporalserver runs a single-process Temporal server backed by a SQLite file, with the Web UI.
// It is DeviceWarden's default so that a laptop or CI needs no external services.
package temporalserver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"

	"github.com/devicewarden/devicewarden/internal/ports"
)

// Config describes the embedded server.
type Config struct {
	// DBPath is the SQLite file; it is created with its schema on first start and reused after.
	DBPath string
	// FrontendAddress is host:port for the gRPC frontend; port 0 picks a free one.
	FrontendAddress string
	// UIAddress is host:port for the Web UI; empty disables the UI, port 0 picks a free one.
	UIAddress string
	// Namespace is created on start if missing.
	Namespace string
	// LogFile receives the server's own logs; empty discards them.
	LogFile string
	// SuggestContinueAsNewAfter is the history length (events) at which the server suggests that
	// a workflow continue as new; 0 keeps Temporal's default. Tests lower it to take that path.
	SuggestContinueAsNewAfter int
	// Settings override dynamic config keys over DynamicConfig (see ParseSetting); benches use them
	// to measure what a setting buys.
	Settings map[string]any
}

// Server is a running embedded Temporal server.
type Server struct {
	srv          temporal.Server
	config       *liveConfig
	ui           *uiServer
	lock         *os.File
	frontendAddr string
	uiURL        string
}

// DynamicConfig is tuned for one process with one history shard. The defaults throttle the
// queue processors to 20 polls/s, which caps signal bursts to one workflow at about 20/s.
func DynamicConfig() dynamicconfig.StaticClient {
	return dynamicconfig.StaticClient{
		dynamicconfig.TransferProcessorMaxPollRPS.Key():       2000,
		dynamicconfig.TransferProcessorMaxPollHostRPS.Key():   2000,
		dynamicconfig.TimerProcessorMaxPollRPS.Key():          2000,
		dynamicconfig.TimerProcessorMaxPollHostRPS.Key():      2000,
		dynamicconfig.VisibilityProcessorMaxPollRPS.Key():     2000,
		dynamicconfig.VisibilityProcessorMaxPollHostRPS.Key(): 2000,
		dynamicconfig.OutboundProcessorMaxPollRPS.Key():       2000,
		dynamicconfig.OutboundProcessorMaxPollHostRPS.Key():   2000,
		// One matching partition: a single worker polls, so more partitions only add latency.
		dynamicconfig.MatchingNumTaskqueueReadPartitions.Key():  1,
		dynamicconfig.MatchingNumTaskqueueWritePartitions.Key(): 1,
	}
}

func (cfg Config) dynamicConfig() dynamicconfig.StaticClient {
	dc := DynamicConfig()
	if cfg.SuggestContinueAsNewAfter > 0 {
		dc[dynamicconfig.HistoryCountSuggestContinueAsNew.Key()] = cfg.SuggestContinueAsNewAfter
	}
	for k, v := range cfg.Settings {
		dc[dynamicconfig.MakeKey(k)] = v
	}
	return dc
}

// Start creates (if needed) and starts the server. Stop must be called to release the file.
func Start(cfg Config) (*Server, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if err := os.MkdirAll(filepath.Dir(cfg.DBPath), 0o755); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	feHost, fePort, err := resolveAddr(cfg.FrontendAddress)
	if err != nil {
		return nil, fmt.Errorf("frontend address: %w", err)
	}
	frontend := net.JoinHostPort(feHost, strconv.Itoa(fePort))
	sqlCfg := &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: cfg.DBPath,
		// WAL with synchronous=NORMAL: commits do not fsync; a power cut may lose the last few
		// transactions but never corrupts the file. Each workflow step is several commits, so
		// this is the difference between ~20 ms and a few ms per step. Production Temporal
		// clusters (--temporal-address) make their own durability choices.
		ConnectAttributes: map[string]string{"mode": "rwc", "journal_mode": "wal", "synchronous": "normal"},
	}
	lock, err := lockState(cfg.DBPath)
	if err != nil {
		return nil, err
	}
	s, err := start(cfg, sqlCfg, feHost, fePort, frontend)
	if err != nil {
		unlockState(lock)
		return nil, err
	}
	s.lock = lock
	return s, nil
}

func start(cfg Config, sqlCfg *config.SQL, feHost string, fePort int, frontend string) (*Server, error) {
	if _, err := os.Stat(cfg.DBPath); os.IsNotExist(err) {
		if err := sqliteschema.SetupSchema(sqlCfg); err != nil {
			return nil, fmt.Errorf("set up sqlite schema: %w", err)
		}
	} else if err := forgetMembership(sqlCfg); err != nil {
		return nil, err
	}
	nsCfg, err := sqliteschema.NewNamespaceConfig("active", cfg.Namespace, false, nil)
	if err != nil {
		return nil, fmt.Errorf("namespace config: %w", err)
	}
	if err := sqliteschema.CreateNamespaces(sqlCfg, nsCfg); err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", cfg.Namespace, err)
	}

	svcCfg, err := serverConfig(feHost, fePort, frontend, sqlCfg)
	if err != nil {
		return nil, err
	}
	var serverLogger log.Logger = log.NewNoopLogger()
	if cfg.LogFile != "" {
		serverLogger = log.NewZapLogger(log.BuildZapLogger(log.Config{Level: "warn", OutputFile: cfg.LogFile}))
	}
	serverLogger = fatalLogger{Logger: serverLogger, out: os.Stderr}
	live := newLiveConfig(cfg.dynamicConfig(), time.Now)
	srv, err := temporal.NewServer(
		temporal.WithConfig(svcCfg),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithLogger(serverLogger),
		temporal.WithDynamicConfigClient(live),
		temporal.WithCustomMetricsHandler(metrics.NoopMetricsHandler),
	)
	if err != nil {
		return nil, fmt.Errorf("create temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start temporal server: %w", err)
	}
	s := &Server{srv: srv, config: live, frontendAddr: frontend}
	if cfg.UIAddress != "" {
		ui, err := startUI(cfg.UIAddress, frontend, cfg.Namespace)
		if err != nil {
			_ = srv.Stop()
			return nil, fmt.Errorf("start web ui: %w", err)
		}
		s.ui, s.uiURL = ui, ui.url
	}
	return s, nil
}

// SearchAttributesChanged says that search attributes were just added: for the next minute the
// server reads them from its database on every use, so they are usable at once (its caches
// refresh only every 60 s).
func (s *Server) SearchAttributesChanged() { s.config.searchAttributesChanged() }

// FrontendAddress is the host:port clients dial.
func (s *Server) FrontendAddress() string { return s.frontendAddr }

// UIURL is the Web UI address, empty when the UI is off.
func (s *Server) UIURL() string { return s.uiURL }

// Stop shuts down the UI and the server, and releases the database file.
func (s *Server) Stop() error {
	defer unlockState(s.lock)
	if s.ui != nil {
		s.ui.stop()
	}
	return s.srv.Stop()
}

func serverConfig(host string, fePort int, frontend string, sqlCfg *config.SQL) (*config.Config, error) {
	svc := func(grpcPort int) (config.Service, error) {
		var err error
		if grpcPort == 0 {
			if grpcPort, err = ports.Pick(host); err != nil {
				return config.Service{}, err
			}
		}
		mPort, err := ports.Pick(host)
		if err != nil {
			return config.Service{}, err
		}
		return config.Service{RPC: config.RPC{GRPCPort: grpcPort, MembershipPort: mPort, BindOnIP: host}}, nil
	}
	services := map[string]config.Service{}
	for name, port := range map[string]int{"frontend": fePort, "history": 0, "matching": 0, "worker": 0} {
		s, err := svc(port)
		if err != nil {
			return nil, fmt.Errorf("allocate port for %s: %w", name, err)
		}
		services[name] = s
	}
	return &config.Config{
		Global: config.Global{
			Membership: config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: host},
		},
		Persistence: config.Persistence{
			DefaultStore:     sqliteplugin.PluginName,
			VisibilityStore:  sqliteplugin.PluginName,
			NumHistoryShards: 1,
			DataStores:       map[string]config.DataStore{sqliteplugin.PluginName: {SQL: sqlCfg}},
		},
		ClusterMetadata: &cluster.Config{
			EnableGlobalNamespace:    false,
			FailoverVersionIncrement: 10,
			MasterClusterName:        "active",
			CurrentClusterName:       "active",
			ClusterInformation: map[string]cluster.ClusterInformation{
				"active": {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontend},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services:            services,
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{Archival: config.ArchivalNamespaceDefaults{
			History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
			Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
		}},
		PublicClient: config.PublicClient{HostPort: frontend},
	}, nil
}

func resolveAddr(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", portStr, err)
	}
	if port == 0 {
		if port, err = ports.Pick(host); err != nil {
			return "", 0, err
		}
	}
	return host, port, nil
}
