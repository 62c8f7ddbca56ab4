package hygiene

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

var hygienePolicy = capacity.HygienePolicy{LeakTimeout: time.Minute, StuckTimeout: time.Minute, DeleteLeaked: true}

// templateClaim is a claim made from a template for the Pod with UID owner, reserved for the
// Pods listed.
func templateClaim(name, node, owner string, reservedFor ...string) *resourcev1.ResourceClaim {
	c := claimOn(name, node)
	c.ResourceVersion = "7"
	c.Annotations = map[string]string{"resource.kubernetes.io/pod-claim-name": "gpu"}
	c.OwnerReferences = []metav1.OwnerReference{{Kind: "Pod", Name: "pod-" + owner, UID: types.UID(owner)}}
	for _, uid := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: "pod-" + uid, UID: types.UID(uid)})
	}
	return c
}

func hygienePod(uid string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "t", UID: types.UID(uid)}, Status: corev1.PodStatus{Phase: phase}}
}

// TestScanClaimsOnAHealthyClusterListsClaimsOnly: no allocation old enough to be a finding, so the
// scan reads nothing but the claims.
func TestScanClaimsOnAHealthyClusterListsClaimsOnly(t *testing.T) {
	fresh := templateClaim("fresh", "n1", "a")
	fresh.CreationTimestamp = metav1.Now()
	_, a, kube := activityEnv(t, fresh, hygienePod("a", corev1.PodRunning))
	kube.ClearActions()
	got, err := a.ScanClaims(context.Background(), hygienePolicy, time.Now())
	if err != nil || len(got) != 0 {
		t.Fatalf("scan = %v, %v", got, err)
	}
	if acts := kube.Actions(); len(acts) != 1 || acts[0].GetVerb() != "list" || acts[0].GetResource().Resource != "resourceclaims" {
		t.Fatalf("a healthy scan made calls %v", acts)
	}
}

// TestScanClaimsFindsEachKind: a leaked template claim whose Pod is gone (deletable), a share whose
// Pod stays Pending, a claim on a node that stopped renewing its Lease, and two that are fine.
func TestScanClaimsFindsEachKind(t *testing.T) {
	now := time.Now()
	_, a, _ := activityEnv(t,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost"}},
		nodeLease("n1", now), nodeLease("lost", now.Add(-time.Hour)),
		templateClaim("leaked", "n1", "gone"),
		templateClaim("kept", "n1", "alive"), hygienePod("alive", corev1.PodPending),
		templateClaim("stuck", "n1", "p", "p"), hygienePod("p", corev1.PodPending),
		templateClaim("running", "n1", "r", "r"), hygienePod("r", corev1.PodRunning),
		templateClaim("unknown", "lost", "gone2"),
		templateClaim("replaced", "n1", "old"), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-old", Namespace: "t", UID: "new"}})
	edge := templateClaim("edge", "n1", "alive")
	edge.OwnerReferences = nil // orphaned: its Pod is gone
	edge.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second).Add(-hygienePolicy.LeakTimeout))
	if _, err := a.Kube.ResourceV1().ResourceClaims("t").Create(context.Background(), edge, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.Metrics = metrics.New()
	got, err := a.ScanClaims(context.Background(), hygienePolicy, now.Truncate(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]capacity.Finding{}
	for _, f := range got {
		kinds[f.Claim] = f
	}
	if len(got) != 6 || kinds["leaked"].Kind != capacity.FindingLeaked || !kinds["leaked"].Deletable ||
		!kinds["replaced"].Deletable || !kinds["edge"].Deletable ||
		kinds["kept"].Kind != capacity.FindingLeaked || kinds["kept"].Deletable ||
		kinds["stuck"].Kind != capacity.FindingStuck || kinds["unknown"].Kind != capacity.FindingNodeLost {
		t.Fatalf("findings = %+v", got)
	}
	if v := testutil.ToFloat64(a.Metrics.ClaimFindings.WithLabelValues(capacity.FindingLeaked)); v != 4 {
		t.Fatalf("leaked findings gauge = %v", v)
	}
}

// TestDeleteLeakedClaimActsOnceAndOnlyOnAFreshLook: the deletion is made at the UID and version
// it looked at; a repeat finds the claim gone; a claim whose Pod came back, one replaced under a
// new UID, one on a lost node and a dry run are left alone.
func TestDeleteLeakedClaimActsOnceAndOnlyOnAFreshLook(t *testing.T) {
	now := time.Now()
	_, a, kube := activityEnv(t,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost"}},
		nodeLease("n1", now), nodeLease("lost", now.Add(-time.Hour)),
		templateClaim("leaked", "n1", "gone"), templateClaim("back", "n1", "b"), hygienePod("b", corev1.PodRunning),
		templateClaim("unknown", "lost", "gone"))
	ctx := context.Background()
	in := func(name string) HygieneInput {
		return HygieneInput{Namespace: "t", Claim: name, UID: name, Policy: hygienePolicy}
	}
	a.DryRun = true
	if res, err := a.DeleteLeakedClaim(ctx, in("leaked")); err != nil || res.Deleted || !res.Finding.Deletable {
		t.Fatalf("dry run: %+v %v", res, err)
	}
	a.DryRun = false
	kube.ClearActions()
	res, err := a.DeleteLeakedClaim(ctx, in("leaked"))
	if err != nil || !res.Deleted || res.Finding.Version != "7" {
		t.Fatalf("delete: %+v %v", res, err)
	}
	var del k8stesting.DeleteAction
	for _, act := range kube.Actions() {
		if d, ok := act.(k8stesting.DeleteAction); ok {
			del = d
		}
	}
	if p := del.GetDeleteOptions().Preconditions; p == nil || p.UID == nil || *p.UID != "leaked" || p.ResourceVersion == nil || *p.ResourceVersion != "7" {
		t.Fatalf("deleted without the UID and version preconditions: %+v", del)
	}
	if res, err := a.DeleteLeakedClaim(ctx, in("leaked")); err != nil || res.Deleted || !res.Gone {
		t.Fatalf("repeat: %+v %v", res, err)
	}
	if n := testutil.ToFloat64(a.Metrics.ClaimsDeleted); n != 1 {
		t.Fatalf("deletions counted %v", n)
	}
	evs, _ := kube.CoreV1().Events("t").List(ctx, metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Reason != kubeobj.EventLeakedClaimDeleted || !strings.Contains(evs.Items[0].Message, "s-leaked") {
		t.Fatalf("events = %+v", evs.Items)
	}
	// Deletions turned off on the worker since the workflow started: a leak its input says may go
	// is left, and is not deletable on a look either.
	if err := kube.Tracker().Add(templateClaim("leaked-2", "n1", "gone")); err != nil {
		t.Fatal(err)
	}
	a.KeepLeakedClaims = true
	if res, err := a.DeleteLeakedClaim(ctx, in("leaked-2")); err != nil || res.Deleted || res.Finding.Deletable || res.Finding.Kind != capacity.FindingLeaked {
		t.Fatalf("deletions off on the worker: %+v %v", res, err)
	}
	if res, err := a.InspectClaim(ctx, in("leaked-2")); err != nil || res.Finding.Deletable {
		t.Fatalf("deletions off on the worker, inspect: %+v %v", res, err)
	}
	a.KeepLeakedClaims = false
	if res, err := a.DeleteLeakedClaim(ctx, in("back")); err != nil || res.Deleted || res.Finding.Deletable {
		t.Fatalf("a claim whose Pod exists: %+v %v", res, err)
	}
	if res, err := a.DeleteLeakedClaim(ctx, in("unknown")); err != nil || res.Deleted || res.Finding.Kind != capacity.FindingNodeLost {
		t.Fatalf("a claim on a lost node: %+v %v", res, err)
	}
	other := in("back")
	other.UID = "someone-else"
	if res, err := a.DeleteLeakedClaim(ctx, other); err != nil || res.Deleted || !res.Gone {
		t.Fatalf("a claim replaced under a new UID: %+v %v", res, err)
	}
	if _, err := kube.ResourceV1().ResourceClaims("t").Get(ctx, "back", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRecordClaimFindingOnce: a finding's Event is written once however often it is recorded;
// an unknown kind is refused.
func TestRecordClaimFindingOnce(t *testing.T) {
	_, a, kube := activityEnv(t)
	f := capacity.Finding{Kind: capacity.FindingStuck, Namespace: "t", Claim: "c", UID: "u1", Version: "9", ShareIDs: []string{"s1"}, Reason: "Pod t/p has not started"}
	for range 2 {
		if err := a.RecordClaimFinding(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := kube.CoreV1().Events("t").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Reason != kubeobj.EventClaimShareStuck || evs.Items[0].Type != corev1.EventTypeWarning ||
		evs.Items[0].InvolvedObject.Kind != "ResourceClaim" || evs.Items[0].InvolvedObject.UID != "u1" ||
		!strings.Contains(evs.Items[0].Message, "version 9, shares s1") {
		t.Fatalf("events = %+v", evs.Items)
	}
	f.Kind = "odd"
	if err := a.RecordClaimFinding(context.Background(), f); err == nil || !strings.Contains(err.Error(), "odd") {
		t.Fatalf("unknown kind: %v", err)
	}
	f.Kind, f.UID, f.ShareIDs = capacity.FindingLeaked, "u2", nil
	if err := a.RecordClaimFinding(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	evs, _ = kube.CoreV1().Events("t").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 2 || !strings.Contains(evs.Items[1].Message, "shares none") {
		t.Fatalf("a claim without shares: %+v", evs.Items)
	}
}

// The apiserver failing: a finding that cannot be recorded is an error (the activity retries); a
// deletion whose Event fails still counts as done; a refused deletion is an error; a claim that
// cannot be read is an error, not gone.
func TestHygieneAPIFailures(t *testing.T) {
	now := time.Now()
	_, a, kube := activityEnv(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, nodeLease("n1", now),
		templateClaim("leaked", "n1", "gone"), templateClaim("conflict", "n1", "gone"))
	ctx := context.Background()
	kube.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf("etcd is down")
	})
	kube.PrependReactor("delete", "resourceclaims", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.(k8stesting.DeleteAction).GetName() == "conflict" {
			return true, nil, apierrors.NewConflict(resourcev1.Resource("resourceclaims"), "conflict", fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	if err := a.RecordClaimFinding(ctx, capacity.Finding{Kind: capacity.FindingLeaked, Namespace: "t", Claim: "leaked", UID: "leaked"}); err == nil || !strings.Contains(err.Error(), "etcd is down") {
		t.Fatalf("record with the apiserver failing: %v", err)
	}
	res, err := a.DeleteLeakedClaim(ctx, HygieneInput{Namespace: "t", Claim: "leaked", UID: "leaked", Policy: hygienePolicy})
	if err != nil || !res.Deleted {
		t.Fatalf("a deletion whose Event failed: %+v %v", res, err)
	}
	res, err = a.DeleteLeakedClaim(ctx, HygieneInput{Namespace: "t", Claim: "conflict", UID: "conflict", Policy: hygienePolicy})
	if err == nil || res.Deleted || !strings.Contains(err.Error(), "at version 7") {
		t.Fatalf("a refused deletion: %+v %v", res, err)
	}
	kube.PrependReactor("get", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf("etcd is down")
	})
	if res, err := a.InspectClaim(ctx, HygieneInput{Namespace: "t", Claim: "conflict", UID: "conflict"}); err == nil || res.Gone {
		t.Fatalf("an unreadable claim: %+v %v", res, err)
	}
}

// InspectClaim looks at one claim: its finding, or gone.
func TestInspectClaim(t *testing.T) {
	now := time.Now()
	_, a, _ := activityEnv(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, nodeLease("n1", now),
		templateClaim("stuck", "n1", "p", "p"), hygienePod("p", corev1.PodPending))
	ctx := context.Background()
	res, err := a.InspectClaim(ctx, HygieneInput{Namespace: "t", Claim: "stuck", UID: "stuck", Policy: hygienePolicy})
	if err != nil || res.Gone || res.Finding.Kind != capacity.FindingStuck || res.Finding.Version != "7" {
		t.Fatalf("stuck: %+v %v", res, err)
	}
	if res, err := a.InspectClaim(ctx, HygieneInput{Namespace: "t", Claim: "nope", UID: "nope", Policy: hygienePolicy}); err != nil || !res.Gone {
		t.Fatalf("missing: %+v %v", res, err)
	}
}
