//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/temporalserver"
)

// devRig is the local cluster alone, with addresses for `dev` processes that run the embedded
// Temporal on one state directory across their restarts, as a user's `make dev` does.
type devRig struct {
	*stack
	state   string
	metrics string
	// console and approvals are the fleet page's and Slack interactivity's addresses.
	console, approvals string
}

func startDevRig(t *testing.T, ctx context.Context) *devRig {
	t.Helper()
	dir := t.TempDir()
	s, stop, err := startCluster(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop) // after the child processes are killed
	s.frontend = freeAddress(t)
	// A lazy client reconnects to each `dev` in turn on the same address.
	tc, err := client.NewLazyClient(client.Options{HostPort: s.frontend, Namespace: "default", Logger: sdklog.NewStructuredLogger(testLogger)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	s.temporal = tc
	return &devRig{stack: s, state: filepath.Join(dir, "state"), metrics: freeAddress(t), console: freeAddress(t), approvals: freeAddress(t)}
}

// dev runs `devicewarden dev` on the rig's cluster and state, and waits until it is ready.
func (r *devRig) dev(t *testing.T, name string, extra ...string) *child {
	t.Helper()
	args := append([]string{"dev", "--kubeconfig", r.kubeconfig, "--state-dir", r.state,
		"--temporal-listen", r.frontend, "--ui-listen", "", "--metrics-address", r.metrics, "--sim-dcgm-listen", "",
		// Free ports, not the defaults: the rigs of tests running in parallel, and a user's make dev.
		"--console-listen", r.console, "--approvals-listen", r.approvals,
		"--breaker-max-count", "1000", "--breaker-max-percent", "0"}, extra...)
	c := startCLI(t, r.dir, name, args...)
	eventually(t, 2*time.Minute, name+" ready", func() error {
		if done, how := c.exited(); done {
			t.Fatalf("%s exited while starting: %s", name, how)
		}
		return expectReady(r.metrics, "ok")
	})
	return c
}

// fenced waits until every device is Quarantined by exactly one transition in one workflow run,
// with its rule in place.
func fenced(t *testing.T, ctx context.Context, s *stack, ids []device.ID, within time.Duration) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("%d devices quarantined", len(ids)), func() error {
		for _, id := range ids {
			st, err := stateOf(ctx, s, id)
			if err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			if st.State != decide.Quarantined || len(st.Transitions) != 1 {
				return fmt.Errorf("%s: %s with %d transitions, want Quarantined with 1", id, st.State, len(st.Transitions))
			}
			if _, err := s.kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{}); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
		}
		return nil
	})
	for _, id := range ids {
		if n, err := runs(ctx, s, id); err != nil || n != 1 {
			t.Fatalf("%s: %d workflow runs (%v), want 1", id, n, err)
		}
	}
}

// TestDevRestartsOnItsState: `dev` stopped with Ctrl-C and started again at once on its state
// serves: the device quarantined before the stop stays so, and a device that fails after the
// restart is fenced. (The restart falls within the 20 s in which the embedded server's ring used
// to wait on the stopped process.)
func TestDevRestartsOnItsState(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := startDevRig(t, ctx)
	ids := devicePods(t, ctx, r.kube, "devrestart", 2)
	first := r.dev(t, "dev-1")
	setHealth(t, ctx, r.kube, ids[:1], corev1.ResourceHealthStatusUnhealthy)
	fenced(t, ctx, r.stack, ids[:1], time.Minute)
	if code := first.interrupt(t); code != 0 {
		t.Fatalf("dev exited %d on Ctrl-C, want 0", code)
	}
	second := r.dev(t, "dev-2")
	setHealth(t, ctx, r.kube, ids[1:], corev1.ResourceHealthStatusUnhealthy)
	fenced(t, ctx, r.stack, ids, time.Minute)
	if done, how := second.exited(); done {
		t.Fatalf("the restarted dev exited: %s", how)
	}
	expectCreatedOnce(t, r.stack, []string{ids[0].TaintRuleName(), ids[1].TaintRuleName()})
}

// TestDevKilledMidStorm SIGKILLs `dev` (an OOM kill, a power cut) as the first rule of a storm of
// Unhealthy reports appears, fails more devices while it is down and starts it again at once on its
// state; the second round does the same while a CPU hog keeps every core busy. Every device that
// failed, before or while `dev` was down, is fenced exactly once: one workflow run, one transition,
// and one create of its rule in the apiserver's audit log.
func TestDevKilledMidStorm(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r := startDevRig(t, ctx)
	ids := devicePods(t, ctx, r.kube, "devkill", 36)
	proc := r.dev(t, "dev-0")
	var rules []string
	for round, hog := range []bool{false, true} {
		batch := ids[round*18 : (round+1)*18]
		if hog {
			stopHog := cpuHog(t, ctx)
			defer stopHog()
		}
		// Rules of the earlier round exist: the storm waits for a new one.
		wait := stormToFirstRule(t, ctx, r.kube, batch[:12], 0)
		proc.kill(t)
		wait()
		t.Logf("round %d (CPU hog %v): killed with %d of 12 rules created", round, hog, ruled(ctx, r.kube, batch[:12]))
		setHealth(t, ctx, r.kube, batch[12:], corev1.ResourceHealthStatusUnhealthy) // failed while down
		proc = r.dev(t, fmt.Sprintf("dev-%d", round+1))
		fenced(t, ctx, r.stack, batch, 3*time.Minute)
		rules = append(rules, ruleNames(batch)...)
	}
	expectCreatedOnce(t, r.stack, rules)
}

// cpuHog keeps every core busy with processes of its own until the returned func is called.
func cpuHog(t *testing.T, ctx context.Context) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var cmds []*exec.Cmd
	for range runtime.NumCPU() {
		cmd := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	return func() {
		cancel()
		for _, c := range cmds {
			_ = c.Wait()
		}
	}
}

// TestDevKilledMidMigration SIGKILLs `dev` while a migration waits for its Job's checkpoint and
// starts it again on its state: the migration ends migrated, the Job was suspended and resumed
// exactly once (the Job controller's events), and no migration Lease is left.
func TestDevKilledMidMigration(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := startDevRig(t, ctx)
	kube := r.kube
	bad := checkpointingJob(t, ctx, kube, "devmig") // dev's own simulated workload answers the checkpoint
	policyFile := filepath.Join(r.dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(migrateRestartPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	first := r.dev(t, "dev-1", "--policy", policyFile)
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	mid := migrationCheckpointing(t, ctx, r.stack, bad)
	first.kill(t)
	r.dev(t, "dev-2", "--policy", policyFile)
	movedOnce(t, ctx, r.stack, "devmig", mid)
	leases, err := kube.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "devicewarden-migrate-") {
			t.Errorf("migration Lease %s left behind (holder %v)", l.Name, l.Spec.HolderIdentity)
		}
	}
}

// TestRunWaitsForAnUnreachableTemporal: `run` pointed at an external Temporal that does not answer
// for its first minute keeps running, live and not ready with the reason, and comes up once the
// server answers: a device that fails then is fenced.
func TestRunWaitsForAnUnreachableTemporal(t *testing.T) {
	onOwnStack(t) // mostly a wait
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := startDevRig(t, ctx)
	ids := devicePods(t, ctx, r.kube, "runwait", 1)
	proc := startCLI(t, r.dir, "run", "run", "--kubeconfig", r.kubeconfig, "--temporal-address", r.frontend,
		"--metrics-address", r.metrics, "--breaker-max-count", "1000", "--breaker-max-percent", "0")
	away := time.Now()
	eventually(t, 30*time.Second, "run not ready, waiting for Temporal", func() error {
		return expectNotReady(r.metrics, "starting: reach temporal")
	})
	time.Sleep(time.Until(away.Add(time.Minute)))
	if done, how := proc.exited(); done {
		t.Fatalf("run exited while Temporal was unreachable: %s", how)
	}
	if err := expectNotReady(r.metrics, "starting: reach temporal"); err != nil {
		t.Fatalf("after a minute: %v", err)
	}
	if err := expectLive(r.metrics); err != nil {
		t.Fatalf("after a minute: %v", err)
	}
	srv := startServerAt(t, filepath.Join(r.dir, "external", "temporal.db"), r.frontend)
	defer srv.Stop()
	eventually(t, time.Minute, "run ready once Temporal answers", func() error {
		return expectReady(r.metrics, "ok")
	})
	t.Logf("ready %s after Temporal came up", time.Since(away.Add(time.Minute)).Round(time.Second))
	setHealth(t, ctx, r.kube, ids, corev1.ResourceHealthStatusUnhealthy)
	fenced(t, ctx, r.stack, ids, time.Minute)
}

// startServerAt starts a Temporal server of its own on dbPath, listening on address: the external
// Temporal a `run` process was pointed at.
func startServerAt(t *testing.T, dbPath, address string) *temporalserver.Server {
	t.Helper()
	srv, err := temporalserver.Start(temporalserver.Config{DBPath: dbPath, FrontendAddress: address, Namespace: "default",
		LogFile: filepath.Join(filepath.Dir(dbPath), "temporal-server.log")})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// expectLive checks that /healthz at addr answers 200.
func expectLive(addr string) error {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz %d", resp.StatusCode)
	}
	return nil
}
