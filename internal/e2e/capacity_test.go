//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/cli"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// capacityCheck runs `devicewarden capacity check -o json` on the stack's cluster and returns its
// exit code and report.
func capacityCheck(t *testing.T, ctx context.Context, args ...string) (int, map[string]any) {
	t.Helper()
	out, err := shared.kubeCLI(ctx, append([]string{"capacity", "check", "-o", "json"}, args...)...)
	code := cli.ExitCode(err)
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("capacity check output: %v\n%s", err, out)
	}
	return code, rep
}

// TestCapacityCheckOnRealAllocations: the real scheduler gives two Pods shares of one shared
// simulated GPU; the check passes and records each share's grant-time policy. A share written
// past the device's capacity and off its step (as a broken allocator would) makes it fail with
// an exit code of 2, naming the claim, ShareID and device. When the node stops renewing its Lease
// its shares are Unknown until an operator fences it (refused while it was alive).
func TestCapacityCheckOnRealAllocations(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	node := sharedDRANode(t, ctx, "rocap")
	for _, name := range []string{"infer-a", "infer-b"} {
		runningPod(t, ctx, kube, sim.Workload{Namespace: "rocap", Name: name, Node: node, Memory: "16Gi"})
	}
	code, rep := capacityCheck(t, ctx, "--record")
	// kwok renews the node's Lease: nothing on it is Unknown.
	if code != 0 || rep["violations"] != nil || len(unknownOn(rep, node)) != 0 || rep["recorded"].(float64) < 2 {
		t.Fatalf("check of the scheduler's shares: exit %d, %v", code, rep)
	}
	c, err := kube.ResourceV1().ResourceClaims("rocap").Get(ctx, "infer-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grant, err := kube.CoreV1().ConfigMaps("default").Get(ctx, capacity.GrantConfigMap(string(c.UID)), metav1.GetOptions{})
	if err != nil || !strings.Contains(grant.Data[capacity.GrantKey], `"min":"4Gi"`) {
		t.Fatalf("grant recorded in DeviceWarden's namespace: %v %+v", err, grant)
	}
	// 16 + 16 + 10 = 42Gi of 40Gi, and 10Gi is not 4Gi plus a multiple of 4Gi.
	bad := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "rocap"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.Driver}}}}}}
	if bad, err = kube.ResourceV1().ResourceClaims("rocap").Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bad.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: sim.Driver, Pool: node, Device: "gpu-0", ShareID: ptr.To(types.UID("00000000-0000-0000-0000-00000000f0f0")),
		ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}}}}}
	if _, err := kube.ResourceV1().ResourceClaims("rocap").UpdateStatus(ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, rep = capacityCheck(t, ctx)
	vs, _ := rep["violations"].([]any)
	text := fmt.Sprint(vs)
	if code != 2 || len(vs) != 2 || !strings.Contains(text, "invariant:oversold") || !strings.Contains(text, "invariant:policy-breach") ||
		!strings.Contains(text, "claim:forged") || !strings.Contains(text, "shareID:00000000-0000-0000-0000-00000000f0f0") || !strings.Contains(text, node+"/gpu-0") {
		t.Fatalf("exit %d, violations %v", code, vs)
	}
	if err := kube.ResourceV1().ResourceClaims("rocap").Delete(ctx, "forged", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, rep := capacityCheck(t, ctx); code != 0 {
		t.Fatalf("after the forged share is gone: exit %d, %v", code, rep)
	}

	// The node stops heartbeating: its shares are Unknown (and still count as used) until fenced.
	if _, err := shared.kubeCLI(ctx, "capacity", "fence", node, "--actor", "sre"); err == nil || !strings.Contains(err.Error(), "still renews") {
		t.Fatalf("a live node was fenced: %v", err)
	}
	stopHeartbeat(t, ctx, kube, node)
	eventually(t, 30*time.Second, "shares on the lost node Unknown", func() error {
		_, rep := capacityCheck(t, ctx)
		if got := unknownOn(rep, node); len(got) != 2 {
			return fmt.Errorf("unknown on %s: %v", node, got)
		}
		return nil
	})
	if out, err := shared.kubeCLI(ctx, "capacity", "fence", node, "--actor", "sre"); err != nil {
		t.Fatalf("fence: %v\n%s", err, out)
	}
	if _, rep := capacityCheck(t, ctx); len(unknownOn(rep, node)) != 0 {
		t.Fatalf("still Unknown after the fence: %v", rep["unknown"])
	}
}

// unknownOn lists the claims a capacity report calls Unknown on node.
func unknownOn(rep map[string]any, node string) []string {
	var out []string
	list, _ := rep["unknown"].([]any)
	for _, u := range list {
		if m, _ := u.(map[string]any); m["node"] == node {
			out = append(out, fmt.Sprint(m["claim"]))
		}
	}
	return out
}

// stopHeartbeat makes the node look dead: kwok leaves its Pods alone, and its Lease is aged and
// handed to a holder that never renews. kwok keeps renewing a Lease it once held, as a node
// agent may; an admission policy refuses any renewal but ours, as a dead kubelet makes none.
func stopHeartbeat(t *testing.T, ctx context.Context, kube kubernetes.Interface, node string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, localcluster.KwokNodeAnnotation)
	if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	const holder = "dead-kubelet"
	name := "e2e-dead-lease-" + node
	fail := admissionv1.Fail
	pol := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				ResourceNames: []string{node},
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leases"}}}}}},
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("object.metadata.namespace != %q || object.spec.holderIdentity == %q", corev1.NamespaceNodeLease, holder),
				Message: "the node is dead: its Lease is not renewed"}}}}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "lease aged and kept aged", func() error {
		l, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder || l.Spec.RenewTime.After(time.Now().Add(-30*time.Second)) {
			l.Spec.HolderIdentity = ptr.To(holder)
			l.Spec.LeaseDurationSeconds = ptr.To[int32](2)
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-time.Minute)}
			if _, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				return err
			}
			time.Sleep(3 * time.Second) // longer than kwok's renewal at a 2 s duration
			return fmt.Errorf("aged; looking again")
		}
		return nil
	})
}

// sharedDRANode makes a pool of one node with one shared simulated GPU (40Gi in 4Gi steps), owned by
// the DRA driver, and waits until its slice is published.
func sharedDRANode(t *testing.T, ctx context.Context, pool string) string {
	t.Helper()
	return sharedDRANodes(t, ctx, shared.kube, pool, 1)[0]
}

// sharedDRANodes makes a pool of count such nodes in the cluster kube reaches.
func sharedDRANodes(t *testing.T, ctx context.Context, kube kubernetes.Interface, pool string, count int) []string {
	t.Helper()
	if err := sim.EnsureDeviceClass(ctx, kube); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: pool, Count: count, GPUs: 1, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"labels":{"` + sim.LabelOwner + `":"` + sim.OwnerDRA + `"}}}`)
	for _, n := range nodes {
		if _, err := kube.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		wantOwner(t, ctx, kube, n, sim.OwnerDRA, 0)
	}
	return nodes
}
