//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// sharedRollout writes and starts a one-phase rollout that makes pool's class shared and proves
// enforcement first (3 tenants of 8Gi of a 40Gi device, the noisy one trying 4x).
func sharedRollout(t *testing.T, ctx context.Context, pool, onUnenforced string) (rolloutplan.Plan, string) {
	t.Helper()
	class := pool + ".gpu.sim.devicewarden.io"
	yaml := fmt.Sprintf(`name: %[1]s
pluginResource: %[2]s
rollbackHold: 1h
phases:
  - name: shared
    nodes: %[3]s=%[1]s
    classes: [{name: %[4]s, driver: %[5]s, shared: true}]
    namespaces: [%[1]s-team]
    soak: 3s
    enforcement:
      image: %[6]s
      command: [load, --json]
      duration: 1s
      startDelay: 2s
      timeout: 2m
      tenants: 3
      share: 8Gi
      noisy: 4
      tolerance: 0.1
      namespace: %[1]s-proof
      onUnenforced: %[7]s
`, pool, sim.GPUPluginResource, sim.LabelPool, class, sim.Driver, sim.LoadImage, onUnenforced)
	path := filepath.Join(t.TempDir(), pool+".yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := rolloutplan.LoadFile(path)
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, yaml)
	}
	if _, err := api.StartRollout(ctx, shared.temporal, p); err != nil {
		t.Fatal(err)
	}
	return p, class
}

// tenantClaim tries a tenant's claim of class in ns (a dry run): nil when admitted.
func tenantClaim(ctx context.Context, ns, class string) error {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-", Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}}}}}
	_, err := shared.kube.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// proofEvent waits for the proof's Event of the given reason on node and returns its message.
func proofEvent(t *testing.T, ctx context.Context, node, reason string) corev1.Event {
	t.Helper()
	var ev corev1.Event
	eventually(t, 30*time.Second, reason+" Event on "+node, func() error {
		evs, err := shared.kube.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
		if err != nil || len(evs.Items) == 0 {
			return fmt.Errorf("none yet (%v)", err)
		}
		ev = evs.Items[0]
		return nil
	})
	return ev
}

// TestEnforcementProof: three pools of shared simulated GPUs, one rollout each. On the pool whose
// driver enforces shares, the proof passes (the noisy tenant held to its share) and the phase
// opens to tenants. On a pool whose driver does not, the proof fails naming the noisy tenant's
// excess: with onUnenforced whole-device the phase is rolled back to the plugin and its class
// refused; with onUnenforced approve it waits for a person, and an approval lets tenants in with
// the class labelled soft quota, no QoS. Tenants are refused while a proof runs or waits.
func TestEnforcementProof(t *testing.T) {
	besideOthers(t) // its pools, namespaces, classes and rollouts are its own
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube, tc := shared.kube, shared.temporal
	pools := map[string][]string{}
	for _, o := range []sim.PoolOptions{
		{Pool: "enf-ok", Count: 1, GPUs: 2, Shared: true, DriverVersion: "1.2.0", NodeType: "sim-a100"},
		{Pool: "enf-no", Count: 1, GPUs: 2, Shared: true, Unenforced: true, DriverVersion: "1.1.0", NodeType: "sim-a100"},
		{Pool: "enf-ask", Count: 1, GPUs: 2, Shared: true, Unenforced: true},
	} {
		names, err := sim.CreatePool(ctx, kube, o)
		if err != nil {
			t.Fatal(err)
		}
		pools[o.Pool] = names
		if err := sim.EnsureNamespace(ctx, kube, o.Pool+"-team"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	okPlan, okClass := sharedRollout(t, ctx, "enf-ok", rolloutplan.UnenforcedWholeDevice)
	noPlan, noClass := sharedRollout(t, ctx, "enf-no", rolloutplan.UnenforcedWholeDevice)
	askPlan, askClass := sharedRollout(t, ctx, "enf-ask", rolloutplan.UnenforcedApprove)

	// A proof running is listed by the Temporal UI's query, and tenants are refused meanwhile.
	eventually(t, 30*time.Second, "a proof listed as proving", func() error {
		out, err := temporalCLI(t, ctx, "workflow", "list", "--query", "RolloutName = 'enf-ok' AND RolloutState = 'proving'")
		if err != nil || !strings.Contains(out, api.RolloutID(okPlan.Name)) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if err := tenantClaim(ctx, "enf-ok-team", okClass); err == nil || !strings.Contains(err.Error(), "until the driver is proven") {
		t.Errorf("a tenant's claim while the proof runs: %v", err)
	}

	// Enforcing driver: proven, open to tenants.
	st := waitRollout(t, ctx, tc, okPlan.Name, 2*time.Minute, "proven and soaking or done", func(st api.RolloutStatus) bool {
		return st.Step == rolloutplan.StepSoak || st.State == rolloutplan.StateCompleted
	})
	t.Logf("enforcing pool: enable -> open to tenants in %s", time.Since(start).Round(100*time.Millisecond))
	if len(st.Proofs) != 1 || !st.Proofs[0].Enforced {
		t.Fatalf("proofs = %+v", st.Proofs)
	}
	p := st.Proofs[0]
	ids := map[string]bool{}
	for _, tn := range p.Tenants {
		ids[tn.ShareID] = true
		if tn.Result.Throughput < 180 || tn.Result.Throughput > 220 || tn.Fraction != 0.2 {
			t.Errorf("tenant %+v: want about its 20%% share of 1000/s", tn)
		}
	}
	if len(p.Tenants) != 3 || len(ids) != 3 || ids[""] || p.Baseline.Throughput != sim.LoadThroughput || p.Group.DriverVersion != "1.2.0" || p.Group.NodeType != "sim-a100" {
		t.Fatalf("report = %+v", p)
	}
	// Open means open: the rollout said so only once the apiserver had dropped the block.
	if err := tenantClaim(ctx, "enf-ok-team", okClass); err != nil {
		t.Errorf("a tenant's claim once proven: %v", err)
	}
	if ev := proofEvent(t, ctx, pools["enf-ok"][0], kubeobj.EventEnforcementProven); ev.Type != corev1.EventTypeNormal || !strings.Contains(ev.Message, "enforced on") {
		t.Errorf("event = %s %q", ev.Type, ev.Message)
	}

	// Driver that does not enforce, whole-device: rolled back with the report naming the excess.
	st = waitRollout(t, ctx, tc, noPlan.Name, 2*time.Minute, "rolled back", func(st api.RolloutStatus) bool { return st.State == rolloutplan.StateRolledBack })
	if len(st.Proofs) != 1 || st.Proofs[0].Enforced || len(st.Blocks) != 1 || st.Blocks[0].Except != "" {
		t.Fatalf("proofs %+v blocks %+v", st.Proofs, st.Blocks)
	}
	if r := st.Blocks[0].Reason; !strings.Contains(r, "noisy tenant") || !strings.Contains(r, "its share") || !strings.Contains(r, "stays whole-device") {
		t.Errorf("reason = %q", r)
	}
	wantOwner(t, ctx, kube, pools["enf-no"][0], sim.OwnerPlugin, 2)
	if err := tenantClaim(ctx, "enf-no-team", noClass); err == nil {
		t.Error("a tenant's claim of the unproven class was admitted")
	}
	if ev := proofEvent(t, ctx, pools["enf-no"][0], kubeobj.EventEnforcementNotProven); ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "noisy tenant") {
		t.Errorf("event = %s %q", ev.Type, ev.Message)
	}
	out, err := shared.cli(ctx, "rollout", "status", noPlan.Name)
	if err != nil || !strings.Contains(out, "NOT ENFORCED") || !strings.Contains(out, "noisy proof-") || !strings.Contains(out, "why:") {
		t.Errorf("status: %v\n%s", err, out)
	}
	t.Logf("rollout status of the unenforced pool:\n%s", out)

	// Driver that does not enforce, approve: waits, then soft quota.
	st = waitRollout(t, ctx, tc, askPlan.Name, 2*time.Minute, "waiting for a person", func(st api.RolloutStatus) bool {
		return st.State == rolloutplan.StateWaitingApproval && st.Unproven == "shared"
	})
	if err := tenantClaim(ctx, "enf-ask-team", askClass); err == nil {
		t.Error("a tenant's claim was admitted while the unproven phase waits")
	}
	if out, err := shared.cli(ctx, "rollout", "approve", askPlan.Name, "shared", "--actor", "sre", "--reason", "batch inference, soft limits accepted"); err != nil {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	st = waitRollout(t, ctx, tc, askPlan.Name, time.Minute, "open as soft quota", func(st api.RolloutStatus) bool {
		return st.Step == rolloutplan.StepSoak || st.State == rolloutplan.StateCompleted
	})
	if len(st.SoftQuotas) != 1 || st.SoftQuotas[0].Actor != "sre" {
		t.Fatalf("soft quotas = %+v", st.SoftQuotas)
	}
	dc, err := kube.ResourceV1().DeviceClasses().Get(ctx, askClass, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dc.Labels[kubeobj.LabelIsolation] != kubeobj.IsolationSoftQuota || !strings.Contains(dc.Annotations[kubeobj.AnnotationIsolation], "approved by sre") {
		t.Errorf("class labels %v annotations %v", dc.Labels, dc.Annotations)
	}
	if err := tenantClaim(ctx, "enf-ask-team", askClass); err != nil {
		t.Errorf("a tenant's claim once approved: %v", err)
	}
	// The proofs left no load Pod or claim behind.
	for _, pool := range []string{"enf-ok", "enf-no", "enf-ask"} {
		pods, _ := kube.CoreV1().Pods(pool+"-proof").List(ctx, metav1.ListOptions{})
		claims, _ := kube.ResourceV1().ResourceClaims(pool+"-proof").List(ctx, metav1.ListOptions{})
		if len(pods.Items)+len(claims.Items) > 0 {
			t.Errorf("%s: %d load Pods and %d claims left", pool, len(pods.Items), len(claims.Items))
		}
	}
	recordHistory(t, ctx, tc, api.RolloutID(okPlan.Name), "rollout_proven.json")
	recordHistory(t, ctx, tc, api.RolloutID(noPlan.Name), "rollout_unproven_whole_device.json")
	recordHistory(t, ctx, tc, api.RolloutID(askPlan.Name), "rollout_soft_quota.json")
}
