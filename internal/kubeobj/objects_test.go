package kubeobj

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/capacity"
)

// An Event is written once by its name, in the object's namespace (a node's in default), with a
// name cut from the left to 253 characters and no leading dot or dash.
func TestCreateEvent(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	pod := corev1.ObjectReference{Kind: "Pod", Namespace: "team-a", Name: "p"}
	if err := CreateEvent(ctx, kube, pod, "DeviceQuarantined", corev1.EventTypeWarning, "m", "p.rule", "c"); err != nil {
		t.Fatal(err)
	}
	if err := CreateEvent(ctx, kube, pod, "DeviceQuarantined", corev1.EventTypeWarning, "again", "p.rule", "c"); err != nil {
		t.Fatalf("a second write by the same name: %v", err)
	}
	ev, err := kube.CoreV1().Events("team-a").Get(ctx, "p.rule", metav1.GetOptions{})
	if err != nil || ev.Message != "m" || ev.Reason != "DeviceQuarantined" || ev.ReportingController != "c" || ev.Count != 1 {
		t.Fatalf("event %+v %v", ev, err)
	}
	long := strings.Repeat("n", 300) + "x"
	node := corev1.ObjectReference{Kind: "Node", Name: "n1"}
	if err := CreateEvent(ctx, kube, node, "R", corev1.EventTypeNormal, "m", long, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Events("default").Get(ctx, long[len(long)-253:], metav1.GetOptions{}); err != nil {
		t.Errorf("a node's Event with a long name: %v", err)
	}
	exact := strings.Repeat("e", 253)
	if err := CreateEvent(ctx, kube, node, "R", corev1.EventTypeNormal, "m", exact, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Events("default").Get(ctx, exact, metav1.GetOptions{}); err != nil {
		t.Errorf("a 253-character name was cut: %v", err)
	}
	if err := CreateEvent(ctx, kube, node, "R", corev1.EventTypeNormal, "m", ".-lead", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Events("default").Get(ctx, "lead", metav1.GetOptions{}); err != nil {
		t.Errorf("leading dot and dash kept: %v", err)
	}
	broken := fake.NewClientset()
	broken.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver unavailable")
	})
	if err := CreateEvent(ctx, broken, pod, "R", corev1.EventTypeNormal, "m", "x", "c"); err == nil {
		t.Error("a failed write reported success")
	}
}

func TestLeaseExpired(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := &coordinationv1.Lease{}
	if !LeaseExpired(l, t0) {
		t.Error("a Lease never renewed is not expired")
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: t0}
	if !LeaseExpired(l, t0) {
		t.Error("a Lease without a duration is not expired")
	}
	l.Spec.LeaseDurationSeconds = ptr.To(int32(10))
	if LeaseExpired(l, t0.Add(10*time.Second)) {
		t.Error("expired at exactly its duration")
	}
	if !LeaseExpired(l, t0.Add(10*time.Second+time.Nanosecond)) {
		t.Error("not expired past its duration")
	}
}

func TestAllocatedAt(t *testing.T) {
	at := func(s int64) *metav1.Time { return &metav1.Time{Time: time.Unix(s, 0)} }
	alloc := metav1.NewFieldsV1(`{"f:status":{"f:allocation":{}}}`)
	other := metav1.NewFieldsV1(`{"f:status":{"f:reservedFor":{}}}`)
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Subresource: "", Time: at(50), FieldsV1: alloc},
		{Subresource: "status", Time: at(10), FieldsV1: alloc},
		{Subresource: "status", Time: at(30), FieldsV1: alloc},
		{Subresource: "status", Time: at(20), FieldsV1: alloc},
		{Subresource: "status", Time: at(40), FieldsV1: other},
		{Subresource: "status", Time: nil, FieldsV1: alloc},
		{Subresource: "status", Time: at(60)},
	}}}
	if got := AllocatedAt(c); got == nil || got.Unix() != 30 {
		t.Errorf("allocated at %v, want the latest status write of the allocation (30)", got)
	}
	if got := AllocatedAt(&resourcev1.ResourceClaim{}); got != nil {
		t.Errorf("a claim never allocated: %v", got)
	}
}

func TestEnsureDriverClass(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	if created, err := EnsureDriverClass(ctx, kube, "check", "gpu.example.com"); err != nil || !created {
		t.Fatalf("first: %v %v", created, err)
	}
	if created, err := EnsureDriverClass(ctx, kube, "check", "gpu.example.com"); err != nil || created {
		t.Fatalf("second: %v %v", created, err)
	}
	c, err := kube.ResourceV1().DeviceClasses().Get(ctx, "check", metav1.GetOptions{})
	if err != nil || c.Spec.Selectors[0].CEL.Expression != `device.driver == "gpu.example.com"` || c.Labels[LabelManagedBy] != ManagedBy {
		t.Fatalf("class %+v %v", c, err)
	}
	broken := fake.NewClientset()
	broken.PrependReactor("create", "deviceclasses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	if created, err := EnsureDriverClass(ctx, broken, "check", "d"); err == nil || created || !strings.Contains(err.Error(), "check") {
		t.Errorf("failed create: %v %v", created, err)
	}
}

func TestGrantRecords(t *testing.T) {
	ctx := context.Background()
	rec := func(ns, uid, data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "g-" + uid, Labels: map[string]string{capacity.GrantLabel: uid}},
			Data: map[string]string{capacity.GrantKey: data}}
	}
	kube := fake.NewClientset(rec("dw", "u1", "a"), rec("dw", "u2", "b"), rec("other", "u3", "c"),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "dw", Name: "unlabelled"}})
	got, err := GrantRecords(ctx, kube, "dw")
	if err != nil || len(got) != 2 || got["u1"] != "a" || got["u2"] != "b" {
		t.Fatalf("records %v %v", got, err)
	}
	broken := fake.NewClientset()
	broken.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver unavailable")
	})
	if _, err := GrantRecords(ctx, broken, "dw"); err == nil || !strings.Contains(err.Error(), "dw") {
		t.Errorf("failed list: %v", err)
	}
}

func TestPodReady(t *testing.T) {
	pod := func(phase corev1.PodPhase, ready corev1.ConditionStatus, deleting bool) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: ready}}}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	if !PodReady(pod(corev1.PodRunning, corev1.ConditionTrue, false)) {
		t.Error("a running, Ready Pod")
	}
	for name, p := range map[string]*corev1.Pod{
		"not ready": pod(corev1.PodRunning, corev1.ConditionFalse, false),
		"pending":   pod(corev1.PodPending, corev1.ConditionTrue, false),
		"deleting":  pod(corev1.PodRunning, corev1.ConditionTrue, true),
		"no condition": {Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}},
	} {
		if PodReady(p) {
			t.Errorf("%s: ready", name)
		}
	}
}

func TestRolloutObjectNames(t *testing.T) {
	if ReportConfigMap("gpu", "canary") != "devicewarden-rollout-gpu-canary" || BlockName("gpu", "wide") != "devicewarden-rollout-gpu-wide" {
		t.Errorf("names: %s, %s", ReportConfigMap("gpu", "canary"), BlockName("gpu", "wide"))
	}
}
