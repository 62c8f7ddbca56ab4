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
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/cli"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// whatIf runs `devicewarden capacity fit` for one claim asking for mem of a shared simulated GPU
// on node, and returns whether it says the claim fits there.
func whatIf(t *testing.T, ctx context.Context, node, mem string, extra ...string) bool {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: what-if, namespace: rofit}
spec:
  devices:
    requests:
      - name: gpu
        exactly:
          deviceClassName: %s
          selectors: [{cel: {expression: 'device.attributes["%s"].%s == "%s"'}}]
          capacity: {requests: {memory: %s}}
`, sim.Driver, sim.Driver, sim.AttrNode, node, mem)
	path := filepath.Join(t.TempDir(), "claims.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := shared.kubeCLI(ctx, append([]string{"capacity", "fit", "--claims", path, "--node", node}, extra...)...)
	switch code := cli.ExitCode(err); {
	case code == 0 && strings.Contains(out, "fit on 1 of 1 nodes"):
		return true
	case code == 1 && strings.Contains(out, "fit on 0 of 1 nodes"):
		return false
	default:
		t.Fatalf("capacity fit: exit %d %v\n%s", code, err, out)
	}
	return false
}

// scheduled waits up to wait for the Pod to be scheduled (true) or to stay unschedulable (false).
func scheduled(t *testing.T, ctx context.Context, name string, wait time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		p, err := shared.kube.CoreV1().Pods("rofit").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// TestWhatIfAgreesWithTheScheduler: on one shared GPU (40Gi in 4Gi steps) with 24Gi taken, the
// what-if and the real scheduler agree that 8Gi fits and then 12Gi does not, and that 4Gi does not
// fit while a DeviceTaintRule taints the device, but fits when the taint is ignored.
func TestWhatIfAgreesWithTheScheduler(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	node := sharedDRANode(t, ctx, "rofit")
	runningPod(t, ctx, kube, sim.Workload{Namespace: "rofit", Name: "base", Node: node, Memory: "24Gi"})

	if !whatIf(t, ctx, node, "8Gi") {
		t.Fatal("what-if: 8Gi beside 24Gi does not fit")
	}
	if _, err := (sim.Workload{Namespace: "rofit", Name: "fits", Node: node, Memory: "8Gi"}).Create(ctx, kube); err != nil {
		t.Fatal(err)
	}
	if !scheduled(t, ctx, "fits", 30*time.Second) {
		t.Fatal("the scheduler did not place the 8Gi Pod the what-if said fits")
	}
	if whatIf(t, ctx, node, "12Gi") {
		t.Fatal("what-if: 12Gi fits in the 8Gi left")
	}
	if _, err := (sim.Workload{Namespace: "rofit", Name: "toobig", Node: node, Memory: "12Gi"}).Create(ctx, kube); err != nil {
		t.Fatal(err)
	}
	if scheduled(t, ctx, "toobig", 10*time.Second) {
		t.Fatal("the scheduler placed the 12Gi Pod the what-if said does not fit")
	}
	if err := kube.CoreV1().Pods("rofit").Delete(ctx, "toobig", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "rofit-maintenance"}, Spec: resourcev1.DeviceTaintRuleSpec{
		DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(sim.Driver), Pool: ptr.To(node), Device: ptr.To("gpu-0")},
		Taint:          resourcev1.DeviceTaint{Key: "example.com/maintenance", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
	if _, err := kube.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.ResourceV1().DeviceTaintRules().Delete(context.Background(), rule.Name, metav1.DeleteOptions{})
	})
	if whatIf(t, ctx, node, "4Gi") {
		t.Fatal("what-if: 4Gi fits on a tainted device")
	}
	if !whatIf(t, ctx, node, "4Gi", "--ignore-taints") {
		t.Fatal("what-if: 4Gi does not fit with the taint ignored")
	}
	if _, err := (sim.Workload{Namespace: "rofit", Name: "tainted", Node: node, Memory: "4Gi"}).Create(ctx, kube); err != nil {
		t.Fatal(err)
	}
	if scheduled(t, ctx, "tainted", 10*time.Second) {
		t.Fatal("the scheduler placed a Pod on the tainted device")
	}
	p, _ := kube.CoreV1().Pods("rofit").Get(ctx, "tainted", metav1.GetOptions{})
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionFalse {
			t.Fatalf("PodScheduled %s", c.Status)
		}
	}
	// Taint gone: both agree again.
	if err := kube.ResourceV1().DeviceTaintRules().Delete(ctx, rule.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !scheduled(t, ctx, "tainted", 30*time.Second) {
		t.Fatal("the Pod was not placed once the taint was gone")
	}
}
