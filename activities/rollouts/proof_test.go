package rollouts

import (
	"errors"

	"context"
	"go.temporal.io/sdk/temporal"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

func proofPlan() rolloutplan.Plan {
	return rolloutplan.Plan{Name: "r", Phases: []rolloutplan.Phase{{Name: "shared", Nodes: "pool=a",
		Classes: []rolloutplan.Class{{Name: "gpu-shared", Driver: "gpu.example.com", Shared: true}},
		Enforcement: &rolloutplan.Enforcement{Image: "load", Share: "8Gi", Capacity: "memory", Tenants: 3, Noisy: 4, Tolerance: 0.1, Namespace: "proof",
			Identity: []string{"uuid"}, NodeType: rolloutplan.DefaultProofNodeType, DriverVersion: "driverVersion",
			Duration: policy.JSONDuration(time.Second), StartDelay: policy.JSONDuration(time.Second), Timeout: policy.JSONDuration(time.Minute)}}}}
}

func proofNode(name, typ string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "a", rolloutplan.DefaultProofNodeType: typ}}}
}

// sharedSlice publishes devices gpu-0..n-1 on node, shared with 40Gi of memory, at driver version v.
func sharedSlice(node, v string, n int, shared bool) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.example.com",
		NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for i := range n {
		d := resourcev1.Device{Name: "gpu-" + string(rune('0'+i)), AllowMultipleAllocations: ptr.To(shared),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"uuid":          {StringValue: ptr.To(node + "-" + string(rune('0'+i)))},
				"driverVersion": {VersionValue: ptr.To(v)}},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi")}}}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return s
}

func allocatedClaim(pool, device string) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "busy-" + pool + device, Namespace: "team"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Driver: "gpu.example.com", Pool: pool, Device: device}}}}}}
}

// TestProofTargetsOnePerGroup: one free shared device per driver version and node type; an
// allocated device is passed over, an unshared one and a node outside the phase are not looked at.
func TestProofTargetsOnePerGroup(t *testing.T) {
	_, a, _ := activityEnv(t, proofNode("a-0", "x"), proofNode("a-1", "x"), proofNode("a-2", "y"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b-0", Labels: map[string]string{"pool": "b"}}},
		sharedSlice("a-0", "1.0.0", 2, true), sharedSlice("a-1", "1.0.0", 2, true), sharedSlice("a-2", "1.0.0", 1, true), sharedSlice("b-0", "2.0.0", 1, true),
		allocatedClaim("a-0", "gpu-0"))
	p := proofPlan()
	got, err := a.proofTargets(context.Background(), p, p.Phases[0])
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, tg := range got {
		seen = append(seen, tg.group.String()+"="+tg.device)
	}
	want := "driver 1.0.0 on x=a-0/gpu-1 driver 1.0.0 on y=a-2/gpu-0"
	if strings.Join(seen, " ") != want {
		t.Fatalf("targets = %v, want %s", seen, want)
	}
	if pin := got[0].pin; pin != `device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].uuid == "a-0-1"` {
		t.Errorf("pin = %s", pin)
	}
}

// TestProofTargetsRefuseWhatCannotBeProved: no shared device, shares that do not fit, a device
// with no identity are errors no retry fixes; a group whose devices are all allocated is one a
// later attempt may get past.
func TestProofTargetsRefuseWhatCannotBeProved(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name      string
		objs      []runtime.Object
		edit      func(*rolloutplan.Enforcement)
		want      string
		permanent bool
	}{
		{"unshared", []runtime.Object{proofNode("a-0", "x"), sharedSlice("a-0", "1.0.0", 1, false)}, nil, "no shared device with a memory capacity", true},
		{"shares do not fit", []runtime.Object{proofNode("a-0", "x"), sharedSlice("a-0", "1.0.0", 1, true)},
			func(e *rolloutplan.Enforcement) { e.Tenants = 6 }, "6 tenants of 8Gi need 48Gi of memory, and device gpu.example.com/a-0/gpu-0 has 40Gi", true},
		{"no identity", []runtime.Object{proofNode("a-0", "x"), sharedSlice("a-0", "1.0.0", 1, true)},
			func(e *rolloutplan.Enforcement) { e.Identity = []string{"serial"} }, `has no attribute "serial"`, true},
		{"all busy", []runtime.Object{proofNode("a-0", "x"), sharedSlice("a-0", "1.0.0", 1, true), allocatedClaim("a-0", "gpu-0")}, nil, "none free to prove on", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, a, _ := activityEnv(t, c.objs...)
			p := proofPlan()
			if c.edit != nil {
				c.edit(p.Phases[0].Enforcement)
			}
			_, err := a.proofTargets(ctx, p, p.Phases[0])
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			var wait notYet
			if errors.As(err, &wait) {
				if wait.permanent != c.permanent {
					t.Errorf("permanent after the wait = %v", wait.permanent)
				}
				return
			}
			if got := errorType(err) == ErrProofImpossible; got != c.permanent {
				t.Errorf("permanent = %v (%v)", got, err)
			}
		})
	}
}

// TestProofClearsAnEarlierAttemptFirst: load Pods and claims an attempt left (a worker died mid-
// proof) are deleted before the next attempt looks for a device.
func TestProofClearsAnEarlierAttemptFirst(t *testing.T) {
	sel := map[string]string{kubeobj.LabelProof: proofLabel("r", "shared")}
	other := map[string]string{kubeobj.LabelProof: proofLabel("r", "other")}
	env, a, kube := activityEnv(t, proofNode("a-0", "x"), sharedSlice("a-0", "1.0.0", 1, false),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "left", Namespace: "proof", Labels: sel}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "left", Namespace: "proof", Labels: sel}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "proof", Labels: other}})
	a.ProofWait = time.Millisecond
	_, err := env.ExecuteActivity((&Activities{}).ProveEnforcement, PhaseInput{Plan: proofPlan(), Phase: 0})
	if err == nil || !strings.Contains(err.Error(), "no shared device") || !strings.Contains(err.Error(), ErrProofImpossible) {
		t.Fatalf("err = %v", err)
	}
	pods, _ := kube.CoreV1().Pods("proof").List(context.Background(), metav1.ListOptions{})
	claims, _ := kube.ResourceV1().ResourceClaims("proof").List(context.Background(), metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Name != "kept" || len(claims.Items) != 0 {
		t.Errorf("left: %d pods (%v), %d claims", len(pods.Items), pods.Items, len(claims.Items))
	}
}

// finishedLoad is a load Pod that ended with msg, started at started, and its claim's allocation
// of consumed memory.
func finishedLoad(phase corev1.PodPhase, msg string, started time.Time, consumed string) []runtime.Object {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "proof"}, Status: corev1.PodStatus{Phase: phase,
		ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: msg, StartedAt: metav1.NewTime(started)}}}}}}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "proof"}}
	if consumed != "" {
		claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			ShareID: ptr.To(types.UID("share-1")), ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse(consumed)}}}}}
	}
	return []runtime.Object{pod, claim}
}

func TestLoadResult(t *testing.T) {
	start := time.Now()
	good := `{"throughput": 200, "p99Ms": 10.5, "drops": 0, "errors": 0}`
	cases := []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"lost", finishedLoad(corev1.PodFailed, "OOMKilled", start.Add(-time.Second), "8Gi"), "with no result in its termination message"},
		{"late", finishedLoad(corev1.PodSucceeded, good, start.Add(time.Second), "8Gi"), "after the loads' common start"},
		{"nonsense", finishedLoad(corev1.PodSucceeded, `{"throughput": -1}`, start.Add(-time.Second), "8Gi"), "want finite figures, not negative"},
		{"no share", finishedLoad(corev1.PodSucceeded, good, start.Add(-time.Second), ""), "never seen allocated with a share"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, a, _ := activityEnv(t, c.objs...)
			var f rolloutplan.TenantFigures
			f.ShareID, f.Fraction, _ = a.claimShare(context.Background(), "proof", "l", resource.MustParse("40Gi"), "memory")
			_, _, err := a.loadResult(context.Background(), "proof", "l", start, f)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	_, a, _ := activityEnv(t, finishedLoad(corev1.PodSucceeded, good, start.Add(-time.Second), "8Gi")...)
	id, frac, err := a.claimShare(context.Background(), "proof", "l", resource.MustParse("40Gi"), "memory")
	if err != nil || id != "share-1" || frac != 0.2 {
		t.Fatalf("share %q %v %v", id, frac, err)
	}
	f, done, err := a.loadResult(context.Background(), "proof", "l", start, rolloutplan.TenantFigures{ShareID: id, Fraction: frac})
	if err != nil || !done || f.ShareID != "share-1" || f.Fraction != 0.2 || f.Result.Throughput != 200 || f.Result.P99Ms != 10.5 {
		t.Fatalf("figures %+v done %v err %v", f, done, err)
	}
	running := finishedLoad(corev1.PodRunning, "", start, "8Gi")
	_, a, _ = activityEnv(t, running...)
	if _, done, err := a.loadResult(context.Background(), "proof", "l", start, rolloutplan.TenantFigures{}); done || err != nil {
		t.Errorf("a running load: done %v err %v", done, err)
	}
}

// errorType is the type of an application error ("" for any other error).
func errorType(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Type()
	}
	return ""
}

// TestProofWaitsForTheDriverToPublish: a phase switched moments ago has no slices yet; the proof
// looks again until the driver publishes them.
func TestProofWaitsForTheDriverToPublish(t *testing.T) {
	_, a, kube := activityEnv(t, proofNode("a-0", "x"))
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = kube.ResourceV1().ResourceSlices().Create(context.Background(), sharedSlice("a-0", "1.0.0", 1, true), metav1.CreateOptions{})
	}()
	p := proofPlan()
	got, err := a.awaitTargets(context.Background(), p, p.Phases[0])
	if err != nil || len(got) != 1 {
		t.Fatalf("targets %v, err %v", got, err)
	}
}

// TestSharesThatFillTheDeviceFit: tenants whose shares add up to the whole device can be proved.
func TestSharesThatFillTheDeviceFit(t *testing.T) {
	_, a, _ := activityEnv(t, proofNode("a-0", "x"), sharedSlice("a-0", "1.0.0", 1, true))
	p := proofPlan()
	p.Phases[0].Enforcement.Tenants = 5 // 5 x 8Gi = 40Gi
	if got, err := a.proofTargets(context.Background(), p, p.Phases[0]); err != nil || len(got) != 1 {
		t.Fatalf("targets %v, err %v", got, err)
	}
}

// TestClearProofWaitsForItsObjects: a leftover that will not go is an error, not a proof run beside it.
func TestClearProofWaitsForItsObjects(t *testing.T) {
	sel := map[string]string{kubeobj.LabelProof: "x"}
	_, a, kube := activityEnv(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "left", Namespace: "proof", Labels: sel}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "left", Namespace: "proof", Labels: sel}})
	kube.PrependReactor("delete", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, errors.New("stuck") })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := a.clearProof(ctx, "proof", kubeobj.LabelProof+"=x"); err == nil {
		t.Fatal("cleared with a Pod and a claim still there")
	}
}

func TestClaimShareOfNoCapacity(t *testing.T) {
	_, a, _ := activityEnv(t, finishedLoad(corev1.PodRunning, "", time.Now(), "8Gi")...)
	if _, f, err := a.claimShare(context.Background(), "proof", "l", resource.Quantity{}, "memory"); f != 0 || err != nil {
		t.Errorf("share of a device with no capacity = %v, %v", f, err)
	}
	if cut("abc", 3) != "abc" || cut("abcd", 3) != "abc..." {
		t.Error("cut")
	}
}

// TestMarkClassIsolation: a soft quota labels the classes with a note; a proven one takes both off.
func TestMarkClassIsolation(t *testing.T) {
	env, _, kube := activityEnv(t, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu-s", Labels: map[string]string{"keep": "me"}}})
	if _, err := env.ExecuteActivity((&Activities{}).MarkClassIsolation, IsolationInput{Classes: []string{"gpu-s"}, Soft: true, Note: "soft quota, no QoS: approved by sre"}); err != nil {
		t.Fatal(err)
	}
	dc, _ := kube.ResourceV1().DeviceClasses().Get(context.Background(), "gpu-s", metav1.GetOptions{})
	if dc.Labels[kubeobj.LabelIsolation] != kubeobj.IsolationSoftQuota || dc.Annotations[kubeobj.AnnotationIsolation] != "soft quota, no QoS: approved by sre" || dc.Labels["keep"] != "me" {
		t.Fatalf("soft: labels %v annotations %v", dc.Labels, dc.Annotations)
	}
	if _, err := env.ExecuteActivity((&Activities{}).MarkClassIsolation, IsolationInput{Classes: []string{"gpu-s"}}); err != nil {
		t.Fatal(err)
	}
	dc, _ = kube.ResourceV1().DeviceClasses().Get(context.Background(), "gpu-s", metav1.GetOptions{})
	if _, ok := dc.Labels[kubeobj.LabelIsolation]; ok || dc.Annotations[kubeobj.AnnotationIsolation] != "" || dc.Labels["keep"] != "me" {
		t.Fatalf("proven: labels %v annotations %v", dc.Labels, dc.Annotations)
	}
	if _, err := env.ExecuteActivity((&Activities{}).MarkClassIsolation, IsolationInput{Classes: []string{"gone"}, Soft: true}); err == nil || !strings.Contains(err.Error(), "mark device class gone") {
		t.Errorf("a class that is gone: %v", err)
	}
}
