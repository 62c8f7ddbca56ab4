//go:build e2e

// Package e2e runs DeviceWarden against real parts: a local etcd + kube-apiserver + kube-scheduler +
// kube-controller-manager + kwok, and the embedded Temporal server. Nothing here is mocked.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/poll"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/watcher"
)

// stack is one cluster and one Temporal server shared by the package's tests; each test uses its
// own namespace and nodes.
type stack struct {
	kube     kubernetes.Interface
	temporal client.Client
	metrics  *metrics.Metrics
	dir      string
	// frontend is the embedded Temporal's address, for CLI commands under test.
	frontend string
	// server is the embedded Temporal server, for tests that stop it.
	server app.EmbeddedServer
	// kubeconfig and auditLog are the local cluster's, for child processes and write counts.
	kubeconfig string
	auditLog   string
	// noKubelet leaves check Pods running (a test that stops the worker mid-probe).
	noKubelet bool
	// prometheus is the shared stack's Prometheus, which scrapes the simulated dcgm-exporter
	// every second; the shared controller reads its faults.
	prometheus string
}

var shared *stack

// releaseClass is a DeviceClass of the simulated GPUs whose policy reviews quarantines within
// seconds, so the release path can be watched end to end; every other device keeps the default.
const releaseClass = "release.gpu.sim.devicewarden.io"

// ambiguousClass devices are all quarantined when a report could be any of them.
const ambiguousClass = "ambiguous.gpu.sim.devicewarden.io"

// approvalClass devices need a person's approval before release.
const approvalClass = "approval.gpu.sim.devicewarden.io"

// unitClass devices (partitionable GPUs) are reviewed within seconds and move their workloads.
const unitClass = "unit.gpu.sim.devicewarden.io"

// repairClass devices climb a repair ladder (two resets with the simulated driver's reset tool)
// and move their workloads first; their review has no stability window.
const repairClass = "repair.gpu.sim.devicewarden.io"

// rebootClass devices climb a ladder of one reset and then a node step (the simulator's
// NodeReboot) that a person approves, and move nothing.
const rebootClass = "reboot.gpu.sim.devicewarden.io"

// moveClass devices (on the nodes rep-move-*) climb a ladder of one reset and then a node step
// that moves the node's other holders first, with no person involved.
const moveClass = "move.gpu.sim.devicewarden.io"

// unitRepairClass devices (partitionable GPUs) climb the same ladder, and move nothing.
const unitRepairClass = "unit-repair.gpu.sim.devicewarden.io"

// testPolicies is the policy set of the test controllers.
func testPolicies() (*policy.Set, error) {
	pols, err := policy.Parse([]byte(testPolicy))
	if err != nil {
		return nil, err
	}
	return pols.WithIdentity(sim.Driver, sim.Identity...).WithCDI(sim.Driver, sim.DeclaredCDIStyles...), nil
}

const testPolicy = `
policies:
  - name: migrate-test
    match: {deviceClass: ` + migrateClass + `}
    migration: {enabled: true, perNode: 1, clusterWide: 10, checkpointTimeout: 30s, readyTimeout: 2m, decisionTimeout: 5m}
  - name: migrate-slow-test
    match: {deviceClass: ` + migrateSlowClass + `}
    migration: {enabled: true, perNode: 1, clusterWide: 10, checkpointTimeout: 2s, readyTimeout: 2m, decisionTimeout: 5m}
  - name: ambiguous-test
    match: {deviceClass: ` + ambiguousClass + `}
    ambiguous: quarantine-candidates
  - name: approval-test
    match: {deviceClass: ` + approvalClass + `}
    quarantineLease: 3s
    stabilityWindow: 1s
    approvalRequired: true
    approvalTimeout: 5m
  - name: unit-test
    match: {deviceClass: ` + unitClass + `}
    quarantineLease: 6s
    stabilityWindow: 2s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    migration: {enabled: true, perNode: 2, clusterWide: 10, checkpointTimeout: 30s, readyTimeout: 2m, decisionTimeout: 5m}
  - name: repair-test
    match: {deviceClass: ` + repairClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    migration: {enabled: true, perNode: 1, clusterWide: 10, checkpointTimeout: 30s, readyTimeout: 2m, decisionTimeout: 5m}
    repair:
      steps:
        - {kind: reset, attempts: 2, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
  - name: reboot-test
    match: {deviceClass: ` + rebootClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
        - kind: node
          timeout: 1m
          approval: true
          template: {apiVersion: ` + sim.RebootGroup + `/` + sim.RebootVersion + `, kind: ` + sim.RebootKind + `, spec: {nodeName: "{{ .Node }}"}}
  - name: move-test
    match: {deviceClass: ` + moveClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    migration: {enabled: true, perNode: 1, clusterWide: 10, checkpointTimeout: 30s, readyTimeout: 2m, decisionTimeout: 5m}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
        - kind: node
          timeout: 1m
          holders: move
          template: {apiVersion: ` + sim.RebootGroup + `/` + sim.RebootVersion + `, kind: ` + sim.RebootKind + `, spec: {nodeName: "{{ .Node }}"}}
  - name: history-test
    match: {deviceClass: ` + historyClass + `}
    causes: {applicationFaults: {limit: 3, window: 1h}}
  - name: cause-test
    match: {deviceClass: ` + causeClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
        - kind: node
          timeout: 1m
          template: {apiVersion: ` + sim.RebootGroup + `/` + sim.RebootVersion + `, kind: ` + sim.RebootKind + `, spec: {nodeName: "{{ .Node }}"}}
  - name: source-proof-test
    match: {deviceClass: ` + proofClass + `}
    stabilityWindow: 0s
    sourceWait: 20s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
        - kind: node
          timeout: 1m
          template: {apiVersion: ` + sim.RebootGroup + `/` + sim.RebootVersion + `, kind: ` + sim.RebootKind + `, spec: {nodeName: "{{ .Node }}"}}
  - name: unit-repair-test
    match: {deviceClass: ` + unitRepairClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
  - name: outright-test
    match: {deviceClass: ` + outrightClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
        - kind: node
          timeout: 1m
          template: {apiVersion: ` + sim.RebootGroup + `/` + sim.RebootVersion + `, kind: ` + sim.RebootKind + `, spec: {nodeName: 12}}
  - name: domain-test
    match: {deviceClass: ` + domainClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
  - name: domain-move-test
    match: {deviceClass: ` + domainMoveClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    migration: {enabled: true, perNode: 1, clusterWide: 10, checkpointTimeout: 30s, readyTimeout: 2m, decisionTimeout: 5m}
    repair:
      steps:
        - {kind: reset, holders: move, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
  - name: pull-test
    match: {deviceClass: ` + pullClass + `}
    quarantineLease: 3s
    stabilityWindow: 0s
    notRunAlertAfter: 1
    notRunRetry: 5s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
  - name: cli-policy-test
    match: {driver: ` + cliPolicyDriver + `}
    quarantineLease: 2h
    approvalRequired: true
  - name: release-test
    match: {deviceClass: ` + releaseClass + `}
    quarantineLease: 6s
    stabilityWindow: 2s
    probe: {timeout: 30s}
    canary: {timeout: 30s}` + diagPolicy + `
drivers:
  ` + cliPolicyDriver + `: {identity: [uuid]}
  # The simulated GPUs of a baseboard node share one reset domain; the others are reset alone.
  ` + sim.Driver + `: {identity: [` + sim.AttrNode + `, ` + sim.AttrIndex + `, ` + sim.AttrUUID + `], resetDomain: "attribute:` + sim.AttrBaseboard + `"}
`

func TestMain(m *testing.M) {
	flag.Parse()
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(runChild(raw))
	}
	if raw := os.Getenv(cliEnv); raw != "" {
		os.Exit(runCLIChild(raw))
	}
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		os.Exit(0)
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// Alerts are logged by the activities through the default logger; in tests they are noise.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := schedule.takeParallel(); err != nil {
		fmt.Fprintln(os.Stderr, "schedule:", err)
		return 1
	}
	lengths, err := readLengths(lengthsFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedule:", err)
		return 1
	}
	schedule.lengths = lengths
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "devicewarden-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The breaker has its own test and stack; here a cap of 10% of a few dozen devices would let
	// one test's quarantine hold back another's.
	pols, err := testPolicies()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test policy:", err)
		return 1
	}
	s, stopInfra, err := startInfra(ctx, dir, "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "start stack:", err)
		dumpLogs(dir)
		return 1
	}
	// The simulated GPUs' dcgm-exporter, scraped by a real Prometheus that the controller reads.
	promURL, stopProm, err := dcgmThroughPrometheus(ctx, s, filepath.Join(dir, "prometheus"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "start prometheus:", err)
		stopInfra()
		return 1
	}
	s.prometheus = promURL
	mets, stopCtl := s.controller(app.ControllerOptions{Workers: 8, Policies: pols,
		// Tests on this stack fail resets on purpose (reboot and permanent faults): the brake on
		// failed resets is TestResetStormKeepsToTheBudget's, on a stack of its own.
		Breaker:    breaker.Config{Window: 10 * time.Minute, MaxCount: 1000, MaxResets: 1000, MaxResetFailures: 1000},
		Prometheus: &watcher.PromConfig{URL: promURL, Interval: time.Second}})
	s.metrics = mets
	stop := func() { stopCtl(); stopProm(); stopInfra() }
	shared = s
	code := m.Run()
	ran.print(os.Stdout)
	if path := os.Getenv("DEVICEWARDEN_E2E_LENGTHS"); path != "" {
		if err := writeLengths(path, ran); err != nil {
			fmt.Fprintln(os.Stderr, "write the tests' lengths:", err)
			code = 1
		}
	}
	if code != 0 {
		dumpLogs(dir)
	}
	stop()
	return code
}

// dcgmThroughPrometheus serves the simulated dcgm-exporter over the stack's GPUs and runs a
// Prometheus that scrapes it every second; it returns Prometheus' URL.
func dcgmThroughPrometheus(ctx context.Context, s *stack, dir string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: &sim.Exporter{Kube: s.kube, Refresh: 500 * time.Millisecond}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	url, stop, err := runPrometheus(ctx, dir, l.Addr().String()+"/metrics")
	if err != nil {
		srv.Close()
		return "", nil, err
	}
	return url, func() { stop(); srv.Close() }, nil
}

func startStack(ctx context.Context, dir string, opts app.ControllerOptions) (*stack, func(), error) {
	s, stopInfra, err := startInfra(ctx, dir, "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	m, stopCtl := s.controller(opts)
	s.metrics = m
	return s, func() { stopCtl(); stopInfra() }, nil
}

// startInfra starts the cluster and the embedded Temporal server (frontend on address), without a
// controller.
func startInfra(ctx context.Context, dir, address string) (*stack, func(), error) {
	return startInfraWith(ctx, dir, infraOptions{address: address})
}

// infraOptions are what a test may change in the infrastructure it starts.
type infraOptions struct {
	address string
	// suggestContinueAsNew lowers the history length at which the server suggests continue-as-new.
	suggestContinueAsNew int
}

func startInfraWith(ctx context.Context, dir string, o infraOptions) (*stack, func(), error) {
	s, stopCluster, err := startCluster(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	tc, err := app.ConnectTemporal(ctx, app.TemporalOptions{
		Namespace: "default", DBPath: filepath.Join(dir, "temporal", "temporal.db"), FrontendAddress: o.address,
		SuggestContinueAsNewAfter: o.suggestContinueAsNew,
	}, testLogger)
	if err != nil {
		stopCluster()
		return nil, nil, err
	}
	s.temporal, s.frontend, s.server = tc.Client, tc.Server.FrontendAddress(), tc.Server
	stop := func() {
		tc.Close()
		stopCluster()
	}
	return s, stop, nil
}

// startCluster starts the local cluster alone: a test that runs DeviceWarden (and its Temporal)
// in processes of its own fills in the rest.
func startCluster(ctx context.Context, dir string) (*stack, func(), error) {
	cl, err := localcluster.Start(ctx, localcluster.Options{
		Dir:     filepath.Join(dir, "cluster"),
		Builder: &localcluster.Builder{CacheDir: localcluster.DefaultCacheDir(), Out: os.Stderr},
		Out:     os.Stderr,
	})
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubeClient(cl.Kubeconfig)
	if err != nil {
		cl.Stop()
		return nil, nil, err
	}
	return &stack{kube: kube, dir: dir, kubeconfig: cl.Kubeconfig, auditLog: cl.AuditLog()}, func() { cl.Stop() }, nil
}

// queryInto runs a workflow's state query and decodes the answer into into, zeroed first: JSON
// leaves a field the answer omits as it was, so a polled variable would keep an earlier answer's
// (the limiter's holders outlived their release that way and failed TestEveryWorkflowPath).
func queryInto(ctx context.Context, tc client.Client, workflowID string, into any) error {
	v, err := tc.QueryWorkflow(ctx, workflowID, "", api.QueryState)
	if err != nil {
		return err
	}
	reflect.ValueOf(into).Elem().SetZero()
	return v.Get(into)
}

// kubeClient is a clientset for a local cluster's kubeconfig.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := app.KubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

var testLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// controller runs a worker and a watcher against the stack until stop is called.
func (s *stack) controller(opts app.ControllerOptions) (*metrics.Metrics, func()) {
	return s.controllerAs(s.kube, opts)
}

// controllerAs runs a controller whose Kubernetes calls go through kube (another identity); the
// simulated driver and kubelet keep the stack's.
func (s *stack) controllerAs(kube kubernetes.Interface, opts app.ControllerOptions) (*metrics.Metrics, func()) {
	m := metrics.New()
	// The simulated driver and kubelet complete probe and canary Pods by the devices' fault state.
	if !s.noKubelet {
		opts.Extra = append(opts.Extra, (&sim.Kubelet{Kube: s.kube, Logger: testLogger}).Run,
			(&sim.Checkpointer{Kube: s.kube, Poll: 100 * time.Millisecond, Logger: testLogger}).Run,
			(&sim.OwnedDrivers{Kube: s.kube, Logger: testLogger}).Run,
			(&sim.Remediator{Kube: s.kube, Logger: testLogger}).Run)
	}
	if kube == s.kube && opts.Reports == nil {
		// Detectors' reports, as the chart installs their CRD; a controller of another identity
		// reads them only with rights its test gives it.
		if err := app.InstallReportCRD(context.Background(), s.kube); err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
		} else if opts.Reports, err = app.ReportsClient(s.kubeconfig); err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := app.RunController(ctx, kube, s.temporal, opts, m, testLogger); err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
		}
	}()
	return m, func() { cancel(); wg.Wait() }
}

// dumpLogs prints the tail of each control-plane log to help read a failure.
func dumpLogs(dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "cluster", "logs", "kube*.log"))
	etcd, _ := filepath.Glob(filepath.Join(dir, "cluster", "logs", "etcd.log"))
	logs = append(logs, etcd...)
	logs = append(logs, filepath.Join(dir, "temporal", "temporal-server.log"))
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		st, _ := f.Stat()
		if st.Size() > 4000 {
			_, _ = f.Seek(-4000, io.SeekEnd)
		}
		data, _ := io.ReadAll(f)
		f.Close()
		fmt.Fprintf(os.Stderr, "==== %s (tail)\n%s\n", l, data)
	}
}

// eventually polls cond every 50 ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	poll.Until(t, timeout, what, cond)
}

// ownInfra starts a cluster and an embedded Temporal server of the test's own, without a
// controller, and stops them at the test's end, after the child processes the test starts later
// are killed (cleanups run last first). It returns the stack and its directory.
func ownInfra(t *testing.T, ctx context.Context) (*stack, string) {
	t.Helper()
	dir := t.TempDir()
	s, stop, err := startInfra(ctx, dir, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s, dir
}
