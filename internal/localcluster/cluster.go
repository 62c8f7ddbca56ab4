package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/devicewarden/devicewarden/internal/ports"
)

// Options configures a local control plane.
type Options struct {
	// Dir holds the PKI, etcd data, logs, kubeconfig and the state file.
	Dir string
	// Builder supplies (and if needed builds) the binaries.
	Builder *Builder
	// Out receives progress lines.
	Out io.Writer
	// Detach lets the processes outlive this one (for `cluster up`); otherwise they die with it.
	Detach bool
	// APIServerOnly starts etcd and kube-apiserver alone: for load benchmarks whose synthetic
	// pods no scheduler, controller or kwok should touch.
	APIServerOnly bool
}

// State is persisted in Dir so that `cluster status|down` and other processes can find a running cluster.
type State struct {
	Server string         `json:"server"`
	PIDs   map[string]int `json:"pids"`
}

// Cluster is a running local control plane.
type Cluster struct {
	Dir        string
	Kubeconfig string
	Server     string
	procs      []*proc
	detached   bool
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when a non-detached child exits
	err  error
}

// KubeconfigPath is where the admin kubeconfig of a cluster in dir is written.
func KubeconfigPath(dir string) string { return filepath.Join(dir, "kubeconfig") }

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// Start builds what is missing and starts etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager and kwok on loopback, returning once the apiserver is ready.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if err := opts.Builder.Build(ctx); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{dir, filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	p := pki{dir: filepath.Join(dir, "pki")}
	if err := p.ensure(); err != nil {
		return nil, fmt.Errorf("generate PKI: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	c := &Cluster{Dir: dir, Kubeconfig: KubeconfigPath(dir), Server: fmt.Sprintf("https://127.0.0.1:%d", apiPort), detached: opts.Detach}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	if err := writeKubeconfig(c.Kubeconfig, c.Server, p); err != nil {
		return nil, err
	}
	b := opts.Builder
	fmt.Fprintf(opts.Out, "[cluster] starting etcd %s\n", EtcdVersion)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if err := c.spawn("etcd", b.Binary("etcd"),
		"--name=local", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=local="+peerURL, "--unsafe-no-fsync", "--log-level=warn",
		"--quota-backend-bytes=8589934592"); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 30*time.Second, func() error { return httpOK(http.DefaultClient, etcdURL+"/health") }); err != nil {
		return nil, fmt.Errorf("etcd not healthy: %w (see %s)", err, c.logPath("etcd"))
	}
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyYAML), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Out, "[cluster] starting kube-apiserver %s on %s\n", KubernetesVersion, c.Server)
	if err := c.spawn("kube-apiserver", b.Binary("kube-apiserver"),
		"--audit-policy-file="+auditPolicy, "--audit-log-path="+c.AuditLog(), "--audit-log-format=json",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+p.path("apiserver.crt"), "--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--service-account-key-file="+p.path("sa.pub"), "--service-account-signing-key-file="+p.path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none",
		"--authorization-mode=RBAC",
		// Local pods run on kwok nodes and mount no tokens; this avoids a race with the
		// controller-manager creating each namespace's default ServiceAccount.
		"--disable-admission-plugins=ServiceAccount",
		"--profiling=false", "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000"); err != nil {
		return nil, err
	}
	client, err := adminHTTPClient(p)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 90*time.Second, func() error {
		if err := c.exited(); err != nil {
			return backoffStop{err}
		}
		return httpOK(client, c.Server+"/readyz")
	}); err != nil {
		return nil, fmt.Errorf("kube-apiserver not ready: %w (see %s)", err, c.logPath("kube-apiserver"))
	}
	if opts.APIServerOnly {
		if err := c.saveState(); err != nil {
			return nil, err
		}
		ok = true
		return c, nil
	}
	fmt.Fprintln(opts.Out, "[cluster] starting kube-scheduler, kube-controller-manager, kwok")
	common := []string{"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0"}
	// The defaults (scheduler 50 QPS, controller-manager 20) pace a local cluster of thousands of
	// simulated devices to ~11 Pods scheduled per second; one machine's apiserver takes far more.
	if err := c.spawn("kube-scheduler", b.Binary("kube-scheduler"), append(common, "--kube-api-qps=500", "--kube-api-burst=1000")...); err != nil {
		return nil, err
	}
	if err := c.spawn("kube-controller-manager", b.Binary("kube-controller-manager"), append(common,
		"--service-account-private-key-file="+p.path("sa.key"), "--root-ca-file="+p.path("ca.crt"),
		"--use-service-account-credentials=false", "--kube-api-qps=200", "--kube-api-burst=400",
		"--cluster-signing-cert-file="+p.path("ca.crt"), "--cluster-signing-key-file="+p.path("ca.key"))...); err != nil {
		return nil, err
	}
	kwokArgs := []string{"--kubeconfig=" + c.Kubeconfig, "--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		// Without this kwok keeps no node Leases at all; real kubelets always do.
		"--node-lease-duration-seconds=40"}
	for _, s := range kwokStages {
		kwokArgs = append(kwokArgs, "--config="+filepath.Join(b.stageDir(), filepath.Base(s)))
	}
	if err := c.spawn("kwok", b.Binary("kwok"), kwokArgs...); err != nil {
		return nil, err
	}
	if err := c.saveState(); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Out, "[cluster] ready; kubeconfig: %s\n", c.Kubeconfig)
	ok = true
	return c, nil
}

// KwokNodeAnnotation marks nodes that kwok simulates.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// AuditLog is the apiserver's audit log: every write to a DeviceTaintRule, one JSON event a line.
func (c *Cluster) AuditLog() string { return filepath.Join(c.Dir, "logs", "audit.log") }

// auditPolicyYAML records DeviceTaintRule writes (who, what, response code) and nothing else, so
// tests and operators can count how often a rule was really created.
const auditPolicyYAML = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
    resources:
      - group: resource.k8s.io
        resources: ["devicetaintrules"]
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
`

func (c *Cluster) logPath(name string) string { return filepath.Join(c.Dir, "logs", name+".log") }

func (c *Cluster) spawn(name, bin string, args ...string) error {
	logf, err := os.OpenFile(c.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if c.detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// Children die with this process, so a crashed test leaves nothing behind.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	logf.Close()
	pr := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	c.procs = append(c.procs, pr)
	if !c.detached {
		go func() {
			pr.err = cmd.Wait()
			close(pr.done)
		}()
	}
	return nil
}

// exited reports a child that has already died (only known for non-detached children).
func (c *Cluster) exited() error {
	for _, p := range c.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v", p.name, p.err)
		default:
		}
	}
	return nil
}

func (c *Cluster) saveState() error {
	st := State{Server: c.Server, PIDs: map[string]int{}}
	for _, p := range c.procs {
		st.PIDs[p.name] = p.cmd.Process.Pid
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(statePath(c.Dir), data, 0o644)
}

// Stop terminates the processes in reverse start order.
func (c *Cluster) Stop() error {
	pids := make([]int, 0, len(c.procs))
	for _, p := range c.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	c.procs = nil
	_ = os.Remove(statePath(c.Dir))
	return stopPIDs(pids)
}

// stopPIDs stops processes one at a time, last started first: the apiserver must drain while etcd
// is still up, or it hangs retrying etcd until it is killed.
func stopPIDs(pids []int) error {
	for i := len(pids) - 1; i >= 0; i-- {
		pid := pids[i]
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie child still answers signal 0; read its state.
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	for i := 0; i < len(data); i++ {
		if data[i] == ')' && i+2 < len(data) {
			return data[i+2] != 'Z'
		}
	}
	return true
}

// Status reads the state of a cluster in dir; running is true only when every process is alive.
func Status(dir string) (st State, running bool, err error) {
	data, err := os.ReadFile(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, false, fmt.Errorf("parse %s: %w", statePath(dir), err)
	}
	running = len(st.PIDs) > 0
	for _, pid := range st.PIDs {
		running = running && alive(pid)
	}
	return st, running, nil
}

// Down stops a cluster started with Detach.
func Down(dir string) error {
	st, _, err := Status(dir)
	if err != nil {
		return err
	}
	order := []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"}
	var pids []int
	for _, name := range order {
		if pid, ok := st.PIDs[name]; ok {
			pids = append(pids, pid)
		}
	}
	_ = stopPIDs(pids)
	return os.Remove(statePath(dir))
}

func writeKubeconfig(path, server string, p pki) error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: devicewarden-local
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: devicewarden-local
  context:
    cluster: devicewarden-local
    user: admin
current-context: devicewarden-local
`, server, p.path("ca.crt"), p.path("admin.crt"), p.path("admin.key"))
	return os.WriteFile(path, []byte(kc), 0o600)
}

func adminHTTPClient(p pki) (*http.Client, error) {
	ca, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

func httpOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, body)
	}
	return nil
}

type backoffStop struct{ error }

func waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		last = check()
		if last == nil {
			return nil
		}
		var stop backoffStop
		if errors.As(last, &stop) {
			return stop.error
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("timed out after %s: %w", timeout, last)
}

func freePorts(n int) ([]int, error) {
	out := make([]int, 0, n)
	for range n {
		p, err := ports.Pick("127.0.0.1")
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Pids maps each running control-plane process (etcd, kube-apiserver, ...) to its process ID,
// so benchmarks can read what each one spends.
func (c *Cluster) Pids() map[string]int {
	out := map[string]int{}
	for _, p := range c.procs {
		if p.cmd != nil && p.cmd.Process != nil {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}
