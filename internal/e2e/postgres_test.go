//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// pgShards is the history shards of the stock server the PostgreSQL stack runs: several, as a
// fleet's server has, so device workflows spread over them.
const pgShards = 4

// pgStack is a stack on the stock Temporal server on PostgreSQL, with what a test restarts.
type pgStack struct {
	*stack
	server  *localcluster.PGTemporal
	stopCtl func()
}

// startOnPostgres starts a stack whose Temporal is the stock server (the version the binary
// embeds) on PostgreSQL from the distribution's packages, with SQL visibility and pgShards
// history shards, and DeviceWarden's controller against it. It skips when PostgreSQL is not
// installed (make test installs it when root, as it does Chromium).
func startOnPostgres(t *testing.T, ctx context.Context) *pgStack {
	t.Helper()
	ps := startPostgresStack(t, ctx)
	ps.startController(t)
	t.Cleanup(func() { ps.stopCtl() })
	return ps
}

// startPostgresStack starts the cluster, PostgreSQL and the stock Temporal server on it, and a
// client of that server; DeviceWarden is the test's to start.
func startPostgresStack(t *testing.T, ctx context.Context) *pgStack {
	t.Helper()
	pg, err := localcluster.StartPostgres(ctx)
	if errors.Is(err, localcluster.ErrNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	dir := t.TempDir()
	s, stopCluster, err := startCluster(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopCluster)
	b := &localcluster.Builder{CacheDir: localcluster.DefaultCacheDir(), Out: os.Stderr}
	server, err := b.TemporalOnPostgres(ctx, filepath.Join(dir, "temporal"), pg, pgShards, "default")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Stop)
	tc, err := app.ConnectTemporal(ctx, app.TemporalOptions{Address: server.Address, Namespace: "default"}, testLogger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	s.temporal, s.frontend = tc.Client, server.Address
	return &pgStack{stack: s, server: server}
}

// startController starts DeviceWarden's controller (watcher and worker) on the stack.
func (ps *pgStack) startController(t *testing.T) {
	t.Helper()
	pols, err := testPolicies()
	if err != nil {
		t.Fatal(err)
	}
	ps.metrics, ps.stopCtl = ps.controller(app.ControllerOptions{Workers: 4, Policies: pols,
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 1000, MaxResets: 1000, MaxResetFailures: 1000}})
}

// The quarantine, the fleet page, a restart and the repair ladder on the Temporal a fleet runs: the stock server
// on PostgreSQL with 4 history shards and SQL visibility. A GPU whose Pod reports a transient
// fault is quarantined, and the fleet page lists it. DeviceWarden and the Temporal server then both stop; the Pod goes while
// they are down; both start again, the server on what PostgreSQL kept, and the ladder resets the
// GPU, probes, canaries and releases it. DeviceWarden's search attributes are registered in SQL
// visibility, and the device's workflow is listed by them, as `device list` and the fleet page ask.
func TestTheLadderOnPostgres(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	s := startOnPostgres(t, ctx)
	t.Logf("stack on PostgreSQL up in %s", time.Since(start).Round(time.Millisecond))
	kube := s.kube
	if err := sim.EnsureClass(ctx, kube, domainClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "pg", 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	ns := "pg"
	runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "failing", Node: nodes[0], Index: ptr.To(1), Template: true, DeviceClass: domainClass})
	bad := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-1"}
	if err := sim.SetFaultKind(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48", sim.FaultTransient); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, s.stack, bad, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	quarantined := time.Since(start)
	fleetPageLists(t, ctx, s.stack, bad)
	s.stopCtl()
	s.server.Stop()
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "failing", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	if err := s.server.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s.startController(t)
	t.Logf("the Temporal server and DeviceWarden down and back in %s", time.Since(down).Round(time.Millisecond))
	st := waitState(t, ctx, s.stack, bad, 3*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	if q.Ladder == nil || len(q.Ladder.Tries) != 1 || !q.Ladder.Tries[0].Result.Passed || q.Ladder.Tries[0].Review != "passed: released" {
		t.Fatalf("ladder %+v", q.Ladder)
	}
	if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("rule after release: %v", err)
	}
	// SQL visibility answers the queries DeviceWarden's list makes, by its search attributes.
	eventually(t, 30*time.Second, "the device listed by its search attributes", func() error {
		resp, err := s.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default",
			Query: `DeviceID = '` + bad.String() + `' AND DeviceState = 'Released'`})
		if err != nil {
			return err
		}
		if n := len(resp.GetExecutions()); n != 1 {
			return fmt.Errorf("listed %d workflows", n)
		}
		return nil
	})
	t.Logf("on PostgreSQL (%d shards): quarantined %s after the stack began, released %s after the quarantine",
		pgShards, quarantined.Round(time.Millisecond), q.ClosedAt.Sub(q.CreatedAt).Round(time.Millisecond))
}

var htmlTags = regexp.MustCompile(`(?s)<script.*?</script>|<style.*?</style>|<[^>]+>`)

// fleetPageLists serves the fleet page on the stack's Temporal and waits until it lists the device
// (its visibility queries answered by the stack's visibility store).
func fleetPageLists(t *testing.T, ctx context.Context, s *stack, id device.ID) {
	t.Helper()
	base, _ := serveConsole(t, ctx, s)
	get := func(path string) (string, error) {
		resp, err := http.Get(base + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s", path, resp.Status)
		}
		return string(b), err
	}
	eventually(t, 30*time.Second, "the fleet page lists "+id.String(), func() error {
		page, err := get("/")
		if err != nil {
			return err
		}
		// The page counts the node's devices by the state their workflows' search attributes
		// hold: the quarantined GPU's from visibility, the others healthy with no workflow.
		text := strings.Join(strings.Fields(htmlTags.ReplaceAllString(page, " ")), " ")
		if !strings.Contains(page, id.String()) || !strings.Contains(text, "Healthy 3") || !strings.Contains(text, "Quarantined 1") {
			return fmt.Errorf("not listed: %.300s", text)
		}
		return nil
	})
}
