package watcher

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Tests written against mutants that lived (gremlins): each pins a boundary or a branch.

func TestClaimConditionHealth(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason}
	}
	tests := []struct {
		name   string
		conds  []metav1.Condition
		health device.Health
		msg    string
	}{
		{"none", nil, device.Healthy, ""},
		{"other types say nothing", []metav1.Condition{cond("Allocated", metav1.ConditionFalse, "x"), cond("Prepared", metav1.ConditionUnknown, "y")}, device.Healthy, ""},
		{"healthy true", []metav1.Condition{cond("Healthy", metav1.ConditionTrue, "ok")}, device.Healthy, ""},
		{"the first of equal severity is kept", []metav1.Condition{cond("Ready", metav1.ConditionFalse, "first"), cond("Healthy", metav1.ConditionUnknown, "second")},
			device.Unknown, "claim device condition Ready=False: first "},
		{"the worst wins", []metav1.Condition{cond("Ready", metav1.ConditionFalse, "slow"), cond("Healthy", metav1.ConditionFalse, "xid")},
			device.Unhealthy, "claim device condition Healthy=False: xid "},
	}
	for _, tt := range tests {
		h, msg := conditionHealth(tt.conds)
		if h != tt.health || msg != tt.msg {
			t.Errorf("%s: %s %q, want %s %q", tt.name, h, msg, tt.health, tt.msg)
		}
	}
}

// A Lease without a duration is taken as 40 s (kubelet's default); a Lease seen exactly one
// duration ago is not yet expired.
func TestNodeLeaseDefaultsAndBoundary(t *testing.T) {
	now := time.Unix(1700000000, 0)
	n := newNodeLeases()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now}}}
	n.put(l, now)
	if down, _ := n.changes(now.Add(40 * time.Second)); len(down) != 0 {
		t.Fatalf("down at exactly one duration: %v", down)
	}
	down, _ := n.changes(now.Add(40*time.Second + time.Millisecond))
	if len(down) != 1 || !strings.Contains(down["node-1"], "duration 40s") {
		t.Fatalf("down %v", down)
	}
	acquired := newNodeLeases()
	acquired.put(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Spec: coordinationv1.LeaseSpec{AcquireTime: &metav1.MicroTime{Time: now}}}, now)
	if down, _ := acquired.changes(now.Add(time.Minute)); len(down) != 1 {
		t.Fatalf("a Lease only acquired never expires: %v", down)
	}
}

func TestClaimRefsSkipsUnresolvedTemplateClaims(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
		{Name: "direct", ResourceClaimName: ptrTo("shared-claim")},
		{Name: "gpu", ResourceClaimTemplateName: ptrTo("tmpl")}, // no claim made for it yet
	}}}
	if got := ClaimRefs(pod); len(got) != 1 || got[0] != "ns/shared-claim" {
		t.Fatalf("claim refs %v", got)
	}
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptrTo("p-gpu-x")}}
	if got := ClaimRefs(pod); len(got) != 2 || got[1] != "ns/p-gpu-x" {
		t.Fatalf("claim refs %v", got)
	}
}
