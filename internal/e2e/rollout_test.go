//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/slackapp"
)

// rolloutPhase is one phase of a test plan, written as plan YAML.
type rolloutPhase struct {
	name, pool, class, namespace, soak, gates string
	approve                                   bool
}

// writePlan writes a plan file for the phases (each on its own pool and class) and parses it;
// head is more top-level YAML (e.g. the prometheus address).
func writePlan(t *testing.T, name, head string, phases ...rolloutPhase) (string, rolloutplan.Plan) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\npluginResource: %s\n%sphases:\n", name, sim.GPUPluginResource, head)
	for _, ph := range phases {
		fmt.Fprintf(&b, "  - name: %s\n    nodes: %s=%s\n    classes: [{name: %s, driver: %s}]\n    namespaces: [%s]\n    soak: %s\n    approve: %t\n",
			ph.name, sim.LabelPool, ph.pool, ph.class, sim.Driver, ph.namespace, ph.soak, ph.approve)
		if ph.gates != "" {
			fmt.Fprintf(&b, "    gates: %s\n", ph.gates)
		}
	}
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := rolloutplan.LoadFile(path)
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, b.String())
	}
	return path, p
}

// waitRollout polls the rollout's state query until cond holds.
func waitRollout(t *testing.T, ctx context.Context, tc client.Client, name string, timeout time.Duration, what string, cond func(api.RolloutStatus) bool) api.RolloutStatus {
	t.Helper()
	var st api.RolloutStatus
	eventually(t, timeout, "rollout "+name+": "+what, func() error {
		if err := queryInto(ctx, tc, api.RolloutID(name), &st); err != nil {
			return err
		}
		if !cond(st) {
			return fmt.Errorf("state %s phase %d step %s; log %v", st.State, st.Phase, st.Step, st.Log)
		}
		return nil
	})
	return st
}

func soaking(phase int) func(api.RolloutStatus) bool {
	return func(st api.RolloutStatus) bool { return st.Phase == phase && st.Step == rolloutplan.StepSoak }
}

// nodeOwner reads a node's ownership label and the plugin devices it advertises.
func nodeOwner(ctx context.Context, kube kubernetes.Interface, node string) (string, int64, error) {
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", 0, err
	}
	q := n.Status.Allocatable[sim.GPUPluginResource]
	return n.Labels[sim.LabelOwner], q.Value(), nil
}

// wantOwner waits until the node is owned by owner alone: labelled so, with the plugin advertising
// (plugin) or the DRA slice published (dra), and not the other.
func wantOwner(t *testing.T, ctx context.Context, kube kubernetes.Interface, node, owner string, gpus int64) {
	t.Helper()
	eventually(t, 30*time.Second, node+" owned by "+owner, func() error {
		label, plugin, err := nodeOwner(ctx, kube, node)
		if err != nil {
			return err
		}
		_, serr := kube.ResourceV1().ResourceSlices().Get(ctx, sim.SliceName(node), metav1.GetOptions{})
		slice := serr == nil
		switch {
		case label != owner:
			return fmt.Errorf("label %q", label)
		case owner == sim.OwnerPlugin && (plugin != gpus || slice):
			return fmt.Errorf("plugin advertises %d, slice published %t", plugin, slice)
		case owner == sim.OwnerDRA && (plugin != 0 || !slice):
			return fmt.Errorf("plugin advertises %d, slice published %t", plugin, slice)
		}
		return nil
	})
}

// TestRolloutTwoPhasesAdvanceThroughGates: a canary pool then a wider one move from the plugin to
// DRA. Each phase's workload gets its claim allocated on the new DRA devices, the gates pass, the
// canary waits for a person (approved by a Slack button press, after a pause and resume from our
// CLI and a wrong approval refused through the stock Temporal CLI), and the rollout completes with both pools on DRA and listed by its search attributes.
func TestRolloutTwoPhasesAdvanceThroughGates(t *testing.T) {
	besideOthers(t) // its pools, namespaces, classes and rollouts are its own
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube, tc := shared.kube, shared.temporal
	a, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: "ro2-a", Count: 1, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: "ro2-b", Count: 1, GPUs: 2, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	wantOwner(t, ctx, kube, a[0], sim.OwnerPlugin, 2)
	const gates = "{minClaims: 1, claimToAllocated: {p99: 10s}, allocatedToReady: {p99: 20s}, maxDrift: 0, maxCrossNamespace: 0, allocationFailures: {retryable: 0, nonRetryable: 0, needsCleanup: 0}}"
	_, plan := writePlan(t, "two-phase", "",
		rolloutPhase{name: "canary", pool: "ro2-a", class: "ro2-a.gpu.sim.devicewarden.io", namespace: "ro2-canary", soak: "6s", gates: gates, approve: true},
		rolloutPhase{name: "wide", pool: "ro2-b", class: "ro2-b.gpu.sim.devicewarden.io", namespace: "ro2-team", soak: "6s",
			gates: strings.Replace(gates, "maxDrift: 0", "maxDrift: 0, maxFragmentation: 0.5, maxCapacityViolations: 0", 1)})
	if _, err := api.StartRollout(ctx, tc, plan); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, tc, plan.Name, 30*time.Second, "canary soaking", soaking(0))
	wantOwner(t, ctx, kube, a[0], sim.OwnerDRA, 0)
	runningPod(t, ctx, kube, sim.Workload{Namespace: "ro2-canary", Name: "canary", Node: a[0], DeviceClass: "ro2-a.gpu.sim.devicewarden.io"})

	st := waitRollout(t, ctx, tc, plan.Name, time.Minute, "canary waiting for approval", func(st api.RolloutStatus) bool {
		return st.State == rolloutplan.StateWaitingApproval
	})
	if len(st.Reports) != 1 || !st.Reports[0].Passed() || st.Reports[0].Claims != 1 || st.Reports[0].ClaimToAllocated.Count != 1 {
		t.Fatalf("canary report = %+v", st.Reports)
	}
	if out, err := shared.cli(ctx, "rollout", "pause", plan.Name, "--actor", "sre"); err != nil || !strings.Contains(out, "paused") {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	if out, err := shared.cli(ctx, "rollout", "pause", plan.Name, "--actor", "sre"); err == nil || !strings.Contains(err.Error(), "already paused") {
		t.Fatalf("second pause not refused: %v\n%s", err, out)
	}
	if out, err := shared.cli(ctx, "rollout", "resume", plan.Name, "--actor", "sre"); err != nil {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	out, err := temporalCLI(t, ctx, "workflow", "update", "execute", "--workflow-id", api.RolloutID(plan.Name), "--name", rolloutplan.CmdApprove,
		"--input", `{"actor":"sre","phase":"wide"}`)
	if err == nil || !strings.Contains(out, "does not wait for approval") {
		t.Fatalf("approving the wrong phase was not refused with the reason: %v\n%s", err, out)
	}
	// Approved from Slack, through the same interactivity endpoint as device releases.
	srv := &slackapp.Server{SigningSecret: "e2e-secret", Decider: slackapp.TemporalDecider{Client: tc}, AllowedUsers: []string{"UOPS"}}
	if code := signedPress(srv, "e2e-secret", "USTRANGER", slackapp.ActionRolloutApprove, plan.Name+"/canary"); code != http.StatusOK {
		t.Fatalf("stranger: %d", code)
	}
	if st := waitRollout(t, ctx, tc, plan.Name, time.Second, "still waiting", func(api.RolloutStatus) bool { return true }); st.Awaiting != "canary" {
		t.Fatalf("a stranger's press moved the rollout: %+v", st)
	}
	if code := signedPress(srv, "e2e-secret", "UOPS", slackapp.ActionRolloutApprove, plan.Name+"/canary"); code != http.StatusOK {
		t.Fatalf("approver: %d", code)
	}

	waitRollout(t, ctx, tc, plan.Name, 30*time.Second, "wide soaking", soaking(1))
	wantOwner(t, ctx, kube, b[0], sim.OwnerDRA, 0)
	// The wide pool's devices are shared: a 6Gi request takes an 8Gi share (4Gi steps).
	runningPod(t, ctx, kube, sim.Workload{Namespace: "ro2-team", Name: "wide", Node: b[0], DeviceClass: "ro2-b.gpu.sim.devicewarden.io", Memory: "6Gi"})
	share, err := claimAllocated(ctx, kube, "ro2-team", "wide")
	if err != nil {
		t.Fatal(err)
	}
	r := share.Status.Allocation.Devices.Results[0]
	if mem := r.ConsumedCapacity["memory"]; r.ShareID == nil || mem.Value() != 8<<30 {
		t.Fatalf("shared allocation = %+v", r)
	}
	st = waitRollout(t, ctx, tc, plan.Name, time.Minute, "completed", func(st api.RolloutStatus) bool { return st.State == rolloutplan.StateCompleted })
	if len(st.Reports) != 2 || !st.Reports[1].Passed() || len(st.Enabled) != 2 {
		t.Fatalf("status = %+v", st)
	}
	// 2 devices x 40Gi, 8Gi taken: 72Gi free, none of it under the 4Gi smallest request.
	if f := st.Reports[1].Fragmentation; len(f) != 1 || f[0].Free != 72<<30 || f[0].Fragmented != 0 {
		t.Fatalf("fragmentation = %+v", f)
	}
	if out, err := shared.cli(ctx, "rollout", "status", plan.Name); err != nil || !strings.Contains(out, "Gates wide:") || !strings.Contains(out, "completed") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "rollout listed by its search attributes", func() error {
		out, err := temporalCLI(t, ctx, "workflow", "list", "--query", "RolloutName = 'two-phase' AND RolloutState = 'completed'")
		if err != nil || !strings.Contains(out, api.RolloutID(plan.Name)) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	recordHistory(t, ctx, tc, api.RolloutID(plan.Name), "rollout_two_phases.json")
}

// TestRolloutSlowPublisherRollsBack: the DRA driver publishes 10 s late, so the canary's claim
// waits longer than the gate allows. The phase is rolled back: new claims for the class are
// refused by the admission policy while the running Pod keeps running and its claim stays bound,
// the node goes back to the plugin, and the report and Events stay. Resume lifts the block and
// enables the phase again; a rollback command undoes it.
func TestRolloutSlowPublisherRollsBack(t *testing.T) {
	besideOthers(t) // its pools, namespaces, classes and rollouts are its own
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube, tc := shared.kube, shared.temporal
	nodes, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: "roslow", Count: 1, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	if out, err := shared.kubeCLI(ctx, "sim", "misbehave", node, "--publish-delay", "10s"); err != nil {
		t.Fatalf("misbehave: %v\n%s", err, out)
	}
	const class = "roslow.gpu.sim.devicewarden.io"
	_, plan := writePlan(t, "slow", "", rolloutPhase{name: "canary", pool: "roslow", class: class, namespace: "roslow", soak: "16s",
		gates: "{minClaims: 1, claimToAllocated: {p99: 5s}}"})
	if _, err := api.StartRollout(ctx, tc, plan); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, ctx, tc, plan.Name, 30*time.Second, "soaking", soaking(0))
	w := sim.Workload{Namespace: "roslow", Name: "early", Node: node, DeviceClass: class}
	pod := runningPod(t, ctx, kube, w)

	st := waitRollout(t, ctx, tc, plan.Name, time.Minute, "rolled back", func(st api.RolloutStatus) bool { return st.State == rolloutplan.StateRolledBack })
	// Rolled back means the block is in force: the very first claim for the class made after the
	// rollout says so is refused (a policy takes a moment to be enforced; the rollout waits for it).
	late := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "roslow"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}}}}}
	if _, err := kube.ResourceV1().ResourceClaims("roslow").Create(ctx, late, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("the first claim after the rollout said rolled back: %v, want it refused by the block", err)
	}
	if len(st.Reports) != 1 || st.Reports[0].Passed() || !strings.Contains(st.Reports[0].Failed[0], "claim->allocated p99") {
		t.Fatalf("report = %+v", st.Reports)
	}
	// The running Pod's claim holds the node on DRA: the plugin must not hand its devices out.
	if len(st.Draining) != 1 || st.Draining[0].Change.Nodes[0].Node != node {
		t.Fatalf("draining = %+v", st.Draining)
	}
	wantOwner(t, ctx, kube, node, sim.OwnerDRA, 0)
	if f, rb := testutil.ToFloat64(shared.metrics.RolloutGates.WithLabelValues("failed")), testutil.ToFloat64(shared.metrics.RolloutRollbacks); f < 1 || rb < 1 {
		t.Fatalf("metrics: %v failed gate evaluations, %v rollbacks", f, rb)
	}
	p, err := kube.CoreV1().Pods("roslow").Get(ctx, "early", metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodRunning || p.UID != pod.UID {
		t.Fatalf("running pod after rollback: %v %+v", err, p.Status.Phase)
	}
	c, err := claimAllocated(ctx, kube, "roslow", "early")
	if err != nil || len(c.Status.ReservedFor) != 1 {
		t.Fatalf("bound claim after rollback: %v", err)
	}
	cm, err := kube.CoreV1().ConfigMaps("default").Get(ctx, kubeobj.ReportConfigMap(plan.Name, "canary"), metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data["report.json"], "claim->allocated p99") {
		t.Fatalf("gate report kept: %v", err)
	}
	// The job ends: its claim is released and the node goes back to the plugin.
	if err := kube.CoreV1().Pods("roslow").Delete(ctx, "early", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := kube.ResourceV1().ResourceClaims("roslow").Delete(ctx, "early", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantOwner(t, ctx, kube, node, sim.OwnerPlugin, 2)
	eventually(t, 10*time.Second, "rollback Event on the node", func() error {
		evs, err := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=" + kubeobj.EventRolloutRolledBack})
		if err != nil || len(evs.Items) != 1 {
			return fmt.Errorf("%v: %d events", err, len(evs.Items))
		}
		return nil
	})

	// Fixed: resume lifts the block and enables the phase again.
	if out, err := shared.kubeCLI(ctx, "sim", "misbehave", node, "--reset"); err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	if out, err := shared.cli(ctx, "rollout", "resume", plan.Name, "--actor", "sre", "--reason", "publisher fixed"); err != nil {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	waitRollout(t, ctx, tc, plan.Name, 30*time.Second, "soaking again", soaking(0))
	_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, kubeobj.BlockName(plan.Name, "canary"), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("admission block after resume: %v", err)
	}
	wantOwner(t, ctx, kube, node, sim.OwnerDRA, 0)
	if out, err := shared.cli(ctx, "rollout", "rollback", plan.Name, "--actor", "sre", "--reason", "change freeze"); err != nil {
		t.Fatalf("rollback: %v\n%s", err, out)
	}
	waitRollout(t, ctx, tc, plan.Name, 30*time.Second, "rolled back by command", func(st api.RolloutStatus) bool {
		return st.State == rolloutplan.StateRolledBack && len(st.Enabled) == 0
	})
	wantOwner(t, ctx, kube, node, sim.OwnerPlugin, 2)
	recordHistory(t, ctx, tc, api.RolloutID(plan.Name), "rollout_gate_rollback.json")
	if err := tc.TerminateWorkflow(ctx, api.RolloutID(plan.Name), "", "test done"); err != nil {
		t.Fatal(err)
	}
}

// TestRolloutDoubleOwnedNodeBlocksPreflight: the DRA driver publishes on a node the plugin still
// owns. The phase is blocked at preflight, naming the node, and nothing is switched; once fixed,
// resume (from the stock Temporal CLI) lets it through.
func TestRolloutDoubleOwnedNodeBlocksPreflight(t *testing.T) {
	besideOthers(t) // its pools, namespaces, classes and rollouts are its own
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube, tc := shared.kube, shared.temporal
	nodes, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: "rodouble", Count: 2, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := shared.kubeCLI(ctx, "sim", "misbehave", nodes[1], "--ignore-label"); err != nil {
		t.Fatalf("misbehave: %v\n%s", err, out)
	}
	eventually(t, 10*time.Second, "slice on the plugin's node", func() error {
		_, err := kube.ResourceV1().ResourceSlices().Get(ctx, sim.SliceName(nodes[1]), metav1.GetOptions{})
		return err
	})
	_, plan := writePlan(t, "double", "", rolloutPhase{name: "pool", pool: "rodouble", class: "rodouble.gpu.sim.devicewarden.io", namespace: "rodouble", soak: "1h"})
	if _, err := api.StartRollout(ctx, tc, plan); err != nil {
		t.Fatal(err)
	}
	st := waitRollout(t, ctx, tc, plan.Name, 30*time.Second, "blocked", func(st api.RolloutStatus) bool { return st.State == rolloutplan.StateBlocked })
	if len(st.Violations) != 1 || st.Violations[0].Node != nodes[1] || !strings.Contains(st.Violations[0].Reason, "double ownership") {
		t.Fatalf("violations = %+v", st.Violations)
	}
	for _, n := range nodes {
		if label, _, err := nodeOwner(ctx, kube, n); err != nil || label != sim.OwnerPlugin {
			t.Fatalf("%s switched while blocked: %q %v", n, label, err)
		}
	}
	if out, err := shared.kubeCLI(ctx, "sim", "misbehave", nodes[1], "--reset"); err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	wantOwner(t, ctx, kube, nodes[1], sim.OwnerPlugin, 2)
	if out, err := temporalCLI(t, ctx, "workflow", "update", "execute", "--workflow-id", api.RolloutID(plan.Name), "--name", rolloutplan.CmdResume,
		"--input", `{"actor":"sre"}`); err != nil {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	waitRollout(t, ctx, tc, plan.Name, 30*time.Second, "soaking after the fix", soaking(0))
	wantOwner(t, ctx, kube, nodes[0], sim.OwnerDRA, 0)
	wantOwner(t, ctx, kube, nodes[1], sim.OwnerDRA, 0)
	if err := tc.TerminateWorkflow(ctx, api.RolloutID(plan.Name), "", "test done"); err != nil {
		t.Fatal(err)
	}
}

// TestRolloutDriftRollsBack: the DRA driver publishes one device fewer than the node had under the
// plugin; the drift gate catches it and the phase is rolled back.
func TestRolloutDriftRollsBack(t *testing.T) {
	besideOthers(t) // its pools, namespaces, classes and rollouts are its own
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube, tc := shared.kube, shared.temporal
	nodes, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: "rodrift", Count: 1, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	wantOwner(t, ctx, kube, nodes[0], sim.OwnerPlugin, 2) // what enable records as the node's devices
	if out, err := shared.kubeCLI(ctx, "sim", "misbehave", nodes[0], "--drift", "1"); err != nil {
		t.Fatalf("misbehave: %v\n%s", err, out)
	}
	_, plan := writePlan(t, "drift", "", rolloutPhase{name: "pool", pool: "rodrift", class: "rodrift.gpu.sim.devicewarden.io", namespace: "rodrift",
		soak: "3s", gates: "{maxDrift: 0}"})
	if _, err := api.StartRollout(ctx, tc, plan); err != nil {
		t.Fatal(err)
	}
	st := waitRollout(t, ctx, tc, plan.Name, time.Minute, "rolled back", func(st api.RolloutStatus) bool { return st.State == rolloutplan.StateRolledBack })
	want := nodes[0] + ": DRA slices publish 1 devices, the node had 2"
	if len(st.Reports) != 1 || len(st.Reports[0].Drift) != 1 || st.Reports[0].Drift[0] != want {
		t.Fatalf("report = %+v", st.Reports)
	}
	wantOwner(t, ctx, kube, nodes[0], sim.OwnerPlugin, 2)
	if err := tc.TerminateWorkflow(ctx, api.RolloutID(plan.Name), "", "test done"); err != nil {
		t.Fatal(err)
	}
}
