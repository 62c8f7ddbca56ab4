package rolloutread

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/capacity"
)

const drv = "gpu.example.com"

func TestReduceClaim(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	mf := func(sub string, at time.Time, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Subresource: sub, Time: &metav1.Time{Time: at}, FieldsV1: metav1.NewFieldsV1(fields)}
	}
	ready := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Time{Time: t0.Add(3 * time.Second)}},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Time{Time: t0.Add(9 * time.Second)}}}}}
	c := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "t", CreationTimestamp: metav1.Time{Time: t0},
			ManagedFields: []metav1.ManagedFieldsEntry{
				mf("", t0, `{"f:spec":{}}`),
				mf("status", t0.Add(4*time.Second), `{"f:status":{"f:allocation":{}}}`),
				mf("status", t0.Add(20*time.Second), `{"f:status":{"f:devices":{}}}`),
			}},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "a", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu"}},
			{Name: "b", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "x", DeviceClassName: "gpu-small"}}}}}},
		Status: resourcev1.ResourceClaimStatus{
			Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
				{Driver: drv, Pool: "n1", Device: "gpu-0", ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("8Gi")}}}}},
			ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p1", UID: "p1"}}},
	}
	pods := map[types.UID]*corev1.Pod{"p1": ready}
	got := reduceClaim(c, pods, true)
	if strings.Join(got.Classes, ",") != "gpu,gpu-small" || !got.Created.Equal(t0) {
		t.Errorf("classes %v created %s", got.Classes, got.Created)
	}
	if got.AllocatedAt == nil || !got.AllocatedAt.Equal(t0.Add(4*time.Second)) {
		t.Errorf("allocated at %v, want the allocation's managed-fields time", got.AllocatedAt)
	}
	if got.ReadyAt == nil || !got.ReadyAt.Equal(t0.Add(9*time.Second)) {
		t.Errorf("ready at %v", got.ReadyAt)
	}
	if len(got.Results) != 1 || got.Results[0].Consumed["memory"] != 8<<30 || got.Orphaned {
		t.Errorf("results %+v orphaned %t", got.Results, got.Orphaned)
	}
	// Written by another tool: the Pod's scheduling time stands in.
	c.ManagedFields = nil
	if got := reduceClaim(c, pods, true); got.AllocatedAt == nil || !got.AllocatedAt.Equal(t0.Add(3*time.Second)) {
		t.Errorf("fallback allocated at %v", got.AllocatedAt)
	}
	// Reserved for nobody, made for a Pod that is gone: orphaned (in a tenant namespace only).
	c.Status.ReservedFor = nil
	c.OwnerReferences = []metav1.OwnerReference{{Kind: "Pod", Name: "gone", UID: "gone"}}
	if got := reduceClaim(c, pods, true); !got.Orphaned {
		t.Errorf("leaked claim not orphaned")
	}
	if got := reduceClaim(c, pods, false); got.Orphaned {
		t.Errorf("orphaned outside the tenants")
	}
	c.OwnerReferences[0].UID = "p1"
	if got := reduceClaim(c, pods, true); got.Orphaned {
		t.Errorf("orphaned while its Pod exists")
	}
	c.Status.Allocation = nil
	if got := reduceClaim(c, pods, true); got.AllocatedAt != nil || got.Results != nil {
		t.Errorf("unallocated = %+v", got)
	}
}

func TestPendingOnClaimsAndSmallestRequest(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "t"},
		Spec:   corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "cannot allocate all claims"}}}}
	if p, ok := pendingOnClaims(pod); !ok || p.Reason != "Unschedulable" || p.Message != "cannot allocate all claims" {
		t.Errorf("pending = %+v %t", p, ok)
	}
	noClaims := pod.DeepCopy()
	noClaims.Spec.ResourceClaims = nil
	running := pod.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	scheduled := pod.DeepCopy()
	scheduled.Status.Conditions[0].Status = corev1.ConditionTrue
	for name, p := range map[string]*corev1.Pod{"no claims": noClaims, "running": running, "scheduled": scheduled} {
		if _, ok := pendingOnClaims(p); ok {
			t.Errorf("%s counted as pending on claims", name)
		}
	}
	q := resource.MustParse
	for name, c := range map[string]struct {
		c    resourcev1.DeviceCapacity
		want int64
	}{
		"no policy": {resourcev1.DeviceCapacity{Value: q("40Gi")}, 0},
		"range":     {resourcev1.DeviceCapacity{RequestPolicy: &resourcev1.CapacityRequestPolicy{ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: ptr.To(q("4Gi"))}}}, 4 << 30},
		"values":    {resourcev1.DeviceCapacity{RequestPolicy: &resourcev1.CapacityRequestPolicy{ValidValues: []resource.Quantity{q("10Gi"), q("5Gi"), q("20Gi")}}}, 5 << 30},
		"default":   {resourcev1.DeviceCapacity{RequestPolicy: &resourcev1.CapacityRequestPolicy{Default: ptr.To(q("1Gi"))}}, 0},
	} {
		if got := capacity.SmallestRequest(c.c.RequestPolicy); got != c.want {
			t.Errorf("%s: smallest %d, want %d", name, got, c.want)
		}
	}
}

// TestRolloutSnapshotKeepsThePhase: only the phase's nodes, only its drivers' devices on them.
