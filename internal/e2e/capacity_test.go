package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/cli"
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
// an exit code of 2, naming the claim, ShareID and device.
func TestCapacityCheckOnRealAllocations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureDeviceClass(ctx, kube); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreatePool(ctx, kube, sim.PoolOptions{Pool: "rocap", Count: 1, GPUs: 1, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	patch := []byte(`{"metadata":{"labels":{"` + sim.LabelOwner + `":"` + sim.OwnerDRA + `"}}}`)
	if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wantOwner(t, ctx, kube, node, sim.OwnerDRA, 0)
	for _, name := range []string{"infer-a", "infer-b"} {
		runningPod(t, ctx, kube, sim.Workload{Namespace: "rocap", Name: name, Node: node, Memory: "16Gi"})
	}
	code, rep := capacityCheck(t, ctx, "--record")
	// kwok renews every node's Lease: nothing is Unknown.
	if code != 0 || rep["violations"] != nil || rep["unknown"] != nil || rep["recorded"].(float64) < 2 {
		t.Fatalf("check of the scheduler's shares: exit %d, %v", code, rep)
	}
	c, err := kube.ResourceV1().ResourceClaims("rocap").Get(ctx, "infer-a", metav1.GetOptions{})
	if err != nil || !strings.Contains(c.Annotations[capacity.AnnotationGranted], `"min":"4Gi"`) {
		t.Fatalf("grant recorded: %v %q", err, c.Annotations[capacity.AnnotationGranted])
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
}
