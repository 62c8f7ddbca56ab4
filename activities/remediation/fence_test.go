package remediation

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// moveStep is a node step that moves the node's other holders.
func moveStep() policy.RepairStep {
	s := nodeStep("", 5*time.Second)
	s.Holders = policy.HoldersMove
	return s
}

// nicSlice publishes a second driver's pool on node-1.
func nicSlice(node string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-nic"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "nic.example.com", Pool: resourcev1.ResourcePool{Name: node + "-nics", Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To(node)}}
}

func fences(t *testing.T, a *Activities) map[string]*resourcev1.DeviceTaintRule {
	t.Helper()
	list, err := a.Kube.ResourceV1().DeviceTaintRules().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*resourcev1.DeviceTaintRule{}
	for i, r := range list.Items {
		if r.Spec.Taint.Key == kubeobj.TaintNodeRepair {
			out[*r.Spec.DeviceSelector.Driver+"/"+*r.Spec.DeviceSelector.Pool] = &list.Items[i]
		}
	}
	return out
}

// A node step that moves holders and finds some fences every pool the node publishes (NoSchedule,
// driver and pool always named), names the holders for the workflow to move, and keeps the node's
// permit; once the holders are gone the reboot runs, and at its end the fences go.
func TestNodeStepMovesHoldersBehindAFence(t *testing.T) {
	holder := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team"}, Spec: corev1.PodSpec{NodeName: "node-1",
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	elsewhere := nicSlice("node-2")
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-1", true), gpuSlice(), nicSlice("node-1"), elsewhere, holder)
	r := &releases{}
	a.Breaker = r
	res, err := run(nodeInput(moveStep()))
	if err != nil || !res.Busy || len(res.Holders) != 1 || res.Holders[0] != "team/train" || !strings.Contains(res.Reason, "they are moved first") {
		t.Fatalf("result %+v, %v", res, err)
	}
	got := fences(t, a)
	if len(got) != 2 || got[gpu3.Driver+"/node-1"] == nil || got["nic.example.com/node-1-nics"] == nil {
		t.Fatalf("fences %v", got)
	}
	for _, f := range got {
		if f.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNoSchedule || f.Spec.DeviceSelector.Device != nil || f.Annotations[kubeobj.AnnotationWorkflow] != gpu3.WorkflowID() {
			t.Fatalf("fence %+v", f)
		}
	}
	if len(r.rels) != 0 {
		t.Fatalf("the node's permit was given back while its holders move: %+v", r.rels)
	}
	// Asked again (the next try), the fences stand once.
	if res, err := run(nodeInput(moveStep())); err != nil || !res.Busy || len(fences(t, a)) != 2 {
		t.Fatalf("again: %+v, %v, %d fences", res, err, len(fences(t, a)))
	}
	if err := a.Kube.CoreV1().Pods("team").Delete(context.Background(), "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := remediator(t, a, a.Kube, "boot-2")
	defer stop()
	if res, err := run(nodeInput(moveStep())); err != nil || !res.Passed {
		t.Fatalf("after the move: %+v, %v", res, err)
	}
	if got := fences(t, a); len(got) != 0 {
		t.Fatalf("fences after the reboot: %v", got)
	}
	if len(r.rels) != 1 {
		t.Fatalf("permit releases %+v", r.rels)
	}
}

// A quarantine that ends while its step still moves holders takes its own fences away on release,
// and leaves another device's.
func TestReleaseTakesItsOwnFences(t *testing.T) {
	env, a, _ := activityEnv(t, []runtime.Object{gpuSlice(), nicSlice("node-1")}...)
	other := nodeInput(moveStep())
	other.WorkflowID = "device/other"
	if _, err := (nodeSteps{a}).fenceNode(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	in := ReleaseInput{Device: gpu3, Reason: "r", Actor: "ops", Node: "node-1", WorkflowID: gpu3.WorkflowID(), NodeFence: true}
	if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
		t.Fatal(err)
	}
	if got := fences(t, a); len(got) != 2 {
		t.Fatalf("another device's fences after this one's release: %v", got)
	}
	in.WorkflowID = other.WorkflowID
	if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
		t.Fatal(err)
	}
	if got := fences(t, a); len(got) != 0 {
		t.Fatalf("its own fences after its release: %v", got)
	}
}
