package hygiene

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/capacity"
)

func nodeLease(node string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: "kube-node-lease"},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}, LeaseDurationSeconds: ptr.To(int32(40))}}
}

func claimOn(name, node string) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "t", UID: types.UID(name)},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
			Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: drv, Pool: node, Device: "gpu-0", ShareID: ptr.To(types.UID("s-" + name))}}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}}
}

// TestNodeLossIsUnknownUntilFenced: allocations on a node whose Lease expired are reported
// Unknown until an operator fences it; a live node cannot be fenced; a node deleted from the API is gone
// for good, not Unknown.
func TestNodeLossIsUnknownUntilFenced(t *testing.T) {
	now := time.Now()
	env, a, _ := activityEnv(t,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "live"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost"}},
		nodeLease("live", now), nodeLease("lost", now.Add(-time.Minute)),
		claimOn("on-live", "live"), claimOn("on-lost", "lost"), claimOn("a-on-lost", "lost"), claimOn("on-gone", "gone"))
	report := func() capacity.CheckReport {
		v, err := env.ExecuteActivity(a.CheckCapacity, capacity.CheckInput{})
		if err != nil {
			t.Fatal(err)
		}
		var rep capacity.CheckReport
		_ = v.Get(&rep)
		return rep
	}
	rep := report()
	if len(rep.Unknown) != 2 || rep.Unknown[0].Claim != "a-on-lost" || rep.Unknown[1].Claim != "on-lost" || rep.Unknown[1].ShareIDs[0] != "s-on-lost" ||
		!strings.Contains(rep.Unknown[1].Reason, "capacity fence lost") {
		t.Fatalf("unknown = %+v", rep.Unknown)
	}
	if _, err := env.ExecuteActivity(a.FenceNode, capacity.FenceInput{Node: "live", Actor: "sre"}); err == nil || !strings.Contains(err.Error(), "still renews") {
		t.Fatalf("fencing a live node: %v", err)
	}
	if _, err := env.ExecuteActivity(a.FenceNode, capacity.FenceInput{Node: "gone", Actor: "sre"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("fencing a missing node: %v", err)
	}
	if _, err := env.ExecuteActivity(a.FenceNode, capacity.FenceInput{Node: "lost", Actor: "sre"}); err != nil {
		t.Fatal(err)
	}
	n, _ := a.Kube.CoreV1().Nodes().Get(context.Background(), "lost", metav1.GetOptions{})
	if !strings.HasPrefix(n.Annotations[capacity.AnnotationFenced], "sre ") {
		t.Fatalf("fence annotation = %q", n.Annotations[capacity.AnnotationFenced])
	}
	if rep := report(); len(rep.Unknown) != 0 {
		t.Fatalf("after the fence: %+v", rep.Unknown)
	}
	if _, err := env.ExecuteActivity(a.FenceNode, capacity.FenceInput{Node: "lost", Undo: true}); err != nil {
		t.Fatal(err)
	}
	if rep := report(); len(rep.Unknown) != 2 {
		t.Fatalf("after the undo: %+v", rep.Unknown)
	}
}
