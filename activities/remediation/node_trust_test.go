package remediation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// reboot is a Reboot object as a node step of workflow wf on node writes it.
func rebootObject(name, node, wf, try, tryAt, boot string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("remediation.example.com/v1")
	u.SetKind("Reboot")
	u.SetName(name)
	u.Object["spec"] = map[string]any{"node": node}
	labels, ann := map[string]string{}, map[string]string{kubeobj.AnnotationWorkflow: wf, kubeobj.AnnotationRepairTry: try, kubeobj.AnnotationBootID: boot}
	if tryAt != "" {
		ann[kubeobj.AnnotationRepairTryAt] = tryAt
	}
	kubeobj.NodeLabels(labels, ann, node)
	u.SetLabels(labels)
	u.SetAnnotations(ann)
	return u
}

// An earlier try's object of the same workflow still standing (here: try 2 of an earlier
// quarantine, whose delete failed) is not this try's: it is deleted, and the try passes only on a
// boot newer than its own ask (#52, defect 2: it passed at once on the old boot ID change).
func TestNodeStepDoesNotAdoptAnEarlierTrysObject(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-2", true))
	in := nodeInput(nodeStep("", 5*time.Second))
	in.TryAt = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	name := "devicewarden-reboot-" + sha16("node-1")
	stale := rebootObject(name, "node-1", in.WorkflowID, "2", in.TryAt.Add(-24*time.Hour).Format(time.RFC3339Nano), "boot-1")
	if _, err := a.Objects.Resource(rebootGVR).Create(context.Background(), stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := rebootWhenAsked(t, a, "node-1", "boot-2", "boot-3")
	defer stop()
	res, err := run(in)
	if err != nil || !res.Passed || !strings.Contains(res.Reason, "boot ID boot-3, was boot-2") {
		t.Fatalf("result %+v, %v", res, err)
	}
}

// One that cannot be deleted (a finalizer holds it) makes the try wait, never pass.
func TestNodeStepWaitsForAStuckEarlierObject(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-2", true))
	in := nodeInput(nodeStep("", 5*time.Second))
	in.Try = 3
	name := "devicewarden-reboot-" + sha16("node-1")
	if _, err := a.Objects.Resource(rebootGVR).Create(context.Background(), rebootObject(name, "node-1", in.WorkflowID, "2", "", "boot-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.Objects.(*dynamicfake.FakeDynamicClient).PrependReactor("delete", "reboots", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, nil // the finalizer keeps it
	})
	res, err := run(in)
	if err != nil || res.Passed || !res.Busy || !strings.Contains(res.Reason, "of an earlier try still stands (being deleted)") {
		t.Fatalf("result %+v, %v", res, err)
	}
}

// Nodes whose names share their first 63 characters are two nodes: X does not join Y's reboot
// (it would pass on Y's boot ID at once), and X's step leaves Y's fences alone (#52, defect 3).
func TestNodesSharingA63CharacterPrefix(t *testing.T) {
	prefix := strings.Repeat("n", 63)
	x, y := prefix+"-x", prefix+"-y"
	a, run := nodeEnv(t, true, rebootNode(x, "bx-1", true), rebootNode(y, "by-1", true))
	other := rebootObject("devicewarden-reboot-"+sha16(y), y, "device/gpu.example.com/"+y+"/gpu-0", "1", "", "by-1")
	if _, err := a.Objects.Resource(rebootGVR).Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := rebootWhenAsked(t, a, x, "bx-1", "bx-2")
	defer stop()
	in := nodeInput(nodeStep("", 5*time.Second))
	in.Node = x
	res, err := run(in)
	if err != nil || !res.Passed || !strings.Contains(res.Reason, "boot ID bx-2, was bx-1") || strings.Contains(res.Reason, "joined") {
		t.Fatalf("result %+v, %v", res, err)
	}

	fence := func(node, name string) *resourcev1.DeviceTaintRule {
		labels, ann := map[string]string{}, map[string]string{kubeobj.AnnotationWorkflow: "wf-" + name}
		kubeobj.NodeLabels(labels, ann, node)
		return &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann},
			Spec: resourcev1.DeviceTaintRuleSpec{Taint: resourcev1.DeviceTaint{Key: kubeobj.TaintNodeRepair, Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
	}
	rules := a.Kube.ResourceV1().DeviceTaintRules()
	for _, r := range []*resourcev1.DeviceTaintRule{fence(x, "fence-x"), fence(y, "fence-y")} {
		if _, err := rules.Create(context.Background(), r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := (nodeSteps{a}).unfenceNode(context.Background(), x, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := rules.Get(context.Background(), "fence-y", metav1.GetOptions{}); err != nil {
		t.Fatalf("x's step lifted y's fence: %v", err)
	}
	if _, err := rules.Get(context.Background(), "fence-x", metav1.GetOptions{}); err == nil {
		t.Fatal("x's own fence stands")
	}
}

// EndNodeStep clears what a step left: this workflow's object and fences of the node, and the
// node's permit; another device's object and fences stay.
func TestEndNodeStepClearsWhatTheStepLeft(t *testing.T) {
	a, _ := nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	r := &releases{}
	a.Breaker = r
	in := nodeInput(nodeStep("", time.Minute))
	ctx := context.Background()
	for _, o := range []*unstructured.Unstructured{
		rebootObject("mine", "node-1", in.WorkflowID, "2", "", "boot-1"),
		rebootObject("theirs", "node-1", "device/other", "1", "", "boot-1"),
	} {
		if _, err := a.Objects.Resource(rebootGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, wf := range map[string]string{"fence-mine": in.WorkflowID, "fence-theirs": "device/other", "domain-mine": in.WorkflowID, "domain-theirs": "device/other"} {
		labels, ann := map[string]string{}, map[string]string{kubeobj.AnnotationWorkflow: wf}
		kubeobj.NodeLabels(labels, ann, "node-1")
		key := kubeobj.TaintNodeRepair
		if strings.HasPrefix(name, "domain-") {
			key = kubeobj.TaintDomainReset // a reset's fence of its domain's other devices
		}
		rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann},
			Spec: resourcev1.DeviceTaintRuleSpec{Taint: resourcev1.DeviceTaint{Key: key, Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
		if _, err := a.Kube.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.EndNodeStep(ctx, in); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Objects.Resource(rebootGVR).Get(ctx, "mine", metav1.GetOptions{}); err == nil {
		t.Fatal("the step's own object stands")
	}
	if _, err := a.Objects.Resource(rebootGVR).Get(ctx, "theirs", metav1.GetOptions{}); err != nil {
		t.Fatalf("another device's object was deleted: %v", err)
	}
	if _, err := a.Kube.ResourceV1().DeviceTaintRules().Get(ctx, "fence-mine", metav1.GetOptions{}); err == nil {
		t.Fatal("the step's fence stands")
	}
	if _, err := a.Kube.ResourceV1().DeviceTaintRules().Get(ctx, "fence-theirs", metav1.GetOptions{}); err != nil {
		t.Fatalf("another step's fence was lifted: %v", err)
	}
	if _, err := a.Kube.ResourceV1().DeviceTaintRules().Get(ctx, "domain-mine", metav1.GetOptions{}); err == nil {
		t.Fatal("the reset's fence of its domain stands")
	}
	if _, err := a.Kube.ResourceV1().DeviceTaintRules().Get(ctx, "domain-theirs", metav1.GetOptions{}); err != nil {
		t.Fatalf("another reset's domain fence was lifted: %v", err)
	}
	if want := (breaker.PermitRelease{Key: "node:node-1", Holder: gpu3.String()}); len(r.rels) != 1 || r.rels[0] != want {
		t.Fatalf("released %+v, want %+v", r.rels, want)
	}
}

// A quarantine released while its node step moved holders gives the node's permit back with its
// fences (#52, defect 11: the pool was refused reboots until the hold ended).
func TestReleaseDuringAMoveGivesThePermitBack(t *testing.T) {
	env, a, _ := activityEnv(t)
	r := &releases{}
	a.Breaker = r
	in := ReleaseInput{Device: gpu3, Node: "node-1", WorkflowID: gpu3.WorkflowID(), Actor: "op", Reason: "r", NodeFence: true}
	if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
		t.Fatal(err)
	}
	if want := (breaker.PermitRelease{Key: "node:node-1", Holder: gpu3.String()}); len(r.rels) != 1 || r.rels[0] != want {
		t.Fatalf("released %+v, want %+v", r.rels, want)
	}
	in.NodeFence = false
	if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
		t.Fatal(err)
	}
	if len(r.rels) != 1 {
		t.Fatalf("a release without a node fence gave a permit back: %+v", r.rels)
	}
}

// sha16 is the hash part of a node step's object name for node.
func sha16(node string) string {
	sum := sha256.Sum256([]byte(node))
	return hex.EncodeToString(sum[:])[:16]
}

// rebootWhenAsked gives node the boot ID boot (and Ready) once a Reboot for it stands that was
// asked at boot ID from.
func rebootWhenAsked(t *testing.T, a *Activities, node, from, boot string) func() {
	return rebootFirst(t, a, boot, func(o unstructured.Unstructured) bool {
		n, _, _ := unstructured.NestedString(o.Object, "spec", "node")
		return n == node && o.GetAnnotations()[kubeobj.AnnotationBootID] == from
	})
}

// {{ .Device }} of a physical unit renders a valid object name, not its ID "counters=<set>".
func TestNodeTemplateDeviceOfAUnit(t *testing.T) {
	in := nodeInput(nodeStep("reboot-{{ .Device }}", time.Minute))
	in.Device.Device = "counters=GPU-0_Counters+gpu-1"
	obj, err := in.Step.Object(nodeVars(in))
	if err != nil {
		t.Fatal(err)
	}
	u := unstructured.Unstructured{Object: obj}
	if u.GetName() != "reboot-gpu-0-counters-gpu-1" {
		t.Fatalf("name %q", u.GetName())
	}
	in.Device.Device = "gpu-3"
	if v := nodeVars(in); v.Device != "gpu-3" {
		t.Fatalf("a device's own name changed: %q", v.Device)
	}
}

// A relapse's try 1, and a second retirement, each get an Event of their own (#52: they were
// named from the workflow and the try only, and the second was dropped as a duplicate).
func TestEventsOfARelapseAreNotDropped(t *testing.T) {
	_, a, kube := activityEnv(t)
	ctx := context.Background()
	first, second := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{first, second, second} {
		(checkPods{a}).tryEvent(ctx, "node-1", "reset", gpu3, gpu3.WorkflowID(), 1, at, decide.StepResult{Reason: "exit 1"})
	}
	for _, q := range []string{"2026-12-01T10:00:00Z XID 79", "2026-12-01T11:00:00Z XID 79"} {
		if _, err := a.RecordRetirement(ctx, RetireInput{Device: gpu3, Node: "node-1", WorkflowID: gpu3.WorkflowID(), Reason: "lemon",
			Evidence: map[string]string{"quarantined": q}}); err != nil {
			t.Fatal(err)
		}
	}
	events, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tries, retired := 0, 0
	for _, e := range events.Items {
		switch e.Reason {
		case kubeobj.EventRepairTry:
			tries++
		case "DeviceRetired":
			retired++
		}
	}
	if tries != 2 || retired != 2 {
		t.Fatalf("%d try Events (want 2: one per try, the repeat dropped), %d retirement Events (want 2)", tries, retired)
	}
}

// A node step's permit for a node that no longer exists fails for good, named, not as a breaker
// that cannot be reached.
func TestPermitOfADeletedNode(t *testing.T) {
	env, a, _ := activityEnv(t)
	a.Breaker = &releases{}
	_, err := env.ExecuteActivity(a.AcquirePermit, PermitInput{Device: gpu3, Action: breaker.Reboot, Node: "node-gone", Hold: time.Minute})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != ErrNodeGone || !appErr.NonRetryable() || !strings.Contains(appErr.Message(), "node node-gone no longer exists") {
		t.Fatalf("error %v", err)
	}
}

// holders: wait fences the node before it asks for the reboot and looks at its holders again: a
// Pod that landed between the first look and the fence keeps the node from being rebooted (the
// reboot would have ended it), and the fence goes with the step.
func TestNodeStepThatWaitsFencesTheNodeFirst(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-1", true), gpuSlice())
	kube := a.Kube.(*fake.Clientset)
	kube.PrependReactor("create", "devicetaintrules", func(k8stesting.Action) (bool, runtime.Object, error) {
		late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "late"}, Spec: corev1.PodSpec{NodeName: "node-1",
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		_ = kube.Tracker().Add(late)
		return false, nil, nil
	})
	res, err := run(nodeInput(nodeStep("", 5*time.Second)))
	if err != nil || !res.Busy || !strings.Contains(res.Reason, "Pod team/late, which holds a device, which came as the node was fenced") {
		t.Fatalf("result %+v, %v", res, err)
	}
	if rules, _ := kube.ResourceV1().DeviceTaintRules().List(context.Background(), metav1.ListOptions{}); len(rules.Items) != 0 {
		t.Fatalf("the fence outlived the try: %d rules", len(rules.Items))
	}
	if list, _ := a.Objects.Resource(rebootGVR).List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatal("a reboot was asked for under the late Pod")
	}

	a, run = nodeEnv(t, true, rebootNode("node-1", "boot-1", true), gpuSlice())
	var fencedAtReboot int
	a.Objects.(*dynamicfake.FakeDynamicClient).PrependReactor("create", "reboots", func(k8stesting.Action) (bool, runtime.Object, error) {
		rules, _ := a.Kube.ResourceV1().DeviceTaintRules().List(context.Background(), metav1.ListOptions{})
		fencedAtReboot = len(rules.Items)
		return false, nil, nil
	})
	stop := rebootWhenAsked(t, a, "node-1", "boot-1", "boot-2")
	defer stop()
	if res, err := run(nodeInput(nodeStep("", 5*time.Second))); err != nil || !res.Passed {
		t.Fatalf("result %+v, %v", res, err)
	}
	rules, _ := a.Kube.ResourceV1().DeviceTaintRules().List(context.Background(), metav1.ListOptions{})
	if fencedAtReboot != 1 || len(rules.Items) != 0 {
		t.Fatalf("%d fences when the reboot was asked for (want 1), %d after the step (want 0)", fencedAtReboot, len(rules.Items))
	}
}

// objectName keeps exactly lowercase letters, digits, '-' and '.', at most 63 of them, and trims
// what cannot start or end a name.
func TestObjectName(t *testing.T) {
	for in, want := range map[string]string{
		"az09.AZ-x_y":             "az09.az-x-y",
		"-.a=b+c.-":               "a-b-c",
		strings.Repeat("g", 70):   strings.Repeat("g", 63),
		"counters=gpu-0-counters": "counters-gpu-0-counters",
	} {
		if got := objectName(in); got != want {
			t.Errorf("objectName(%q) = %q, want %q", in, got, want)
		}
	}
}
