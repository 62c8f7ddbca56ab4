package remediation

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

var rebootGVR = schema.GroupVersionResource{Group: "remediation.example.com", Version: "v1", Resource: "reboots"}

// nodeStep is a node step whose template names the node.
func nodeStep(name string, timeout time.Duration) policy.RepairStep {
	md := ""
	if name != "" {
		md = `"metadata": {"name": "` + name + `"}, `
	}
	return policy.RepairStep{Kind: policy.RepairNode, Attempts: 1, Holders: policy.HoldersWait, Check: policy.Check{Timeout: policy.JSONDuration(timeout)},
		Template: `{"apiVersion": "remediation.example.com/v1", "kind": "Reboot", ` + md + `"spec": {"node": "{{ .Node }}"}}`}
}

func rebootNode(name, boot string, ready bool) *corev1.Node {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: boot},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
}

// nodeEnv is an activity environment whose cluster serves the Reboot kind (served false: does not).
func nodeEnv(t *testing.T, served bool, objs ...runtime.Object) (*Activities, func(NodeInput) (decide.StepResult, error)) {
	t.Helper()
	env, a, kube := activityEnv(t, objs...)
	if served {
		kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{GroupVersion: "remediation.example.com/v1",
			APIResources: []metav1.APIResource{{Name: "reboots", Kind: "Reboot"}, {Name: "reboots/status", Kind: "Reboot"}}}}
	}
	a.Objects = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rebootGVR: "RebootList"})
	a.CheckPoll = 10 * time.Millisecond
	return a, func(in NodeInput) (decide.StepResult, error) {
		v, err := env.ExecuteActivity(a.RemediateNode, in)
		var res decide.StepResult
		if err == nil {
			err = v.Get(&res)
		}
		return res, err
	}
}

// remediator plays the node's remediator until stopped: each Reboot it finds gives its node the
// boot ID boot (and Ready), once.
func remediator(t *testing.T, a *Activities, _ kubernetes.Interface, boot string) func() {
	return rebootFirst(t, a, boot, func(unstructured.Unstructured) bool { return true })
}

// rebootFirst reboots the node of the first Reboot that asks matches, once: the node gets the boot
// ID boot and is Ready.
func rebootFirst(t *testing.T, a *Activities, boot string, asks func(unstructured.Unstructured) bool) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
			list, err := a.Objects.Resource(rebootGVR).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, o := range list.Items {
				if !asks(o) {
					continue
				}
				name, _, _ := unstructured.NestedString(o.Object, "spec", "node")
				if _, err := a.Kube.CoreV1().Nodes().UpdateStatus(ctx, rebootNode(name, boot, true), metav1.UpdateOptions{}); err != nil {
					t.Errorf("reboot %s: %v", name, err)
				}
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

func nodeInput(step policy.RepairStep) NodeInput {
	return NodeInput{Device: gpu3, Node: "node-1", Step: step, Try: 2, WorkflowID: gpu3.WorkflowID()}
}

// The step asks for a reboot, waits for a new boot ID and Ready, and deletes its object after.
func TestNodeStepWaitsForTheReboot(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	created := make(chan *unstructured.Unstructured, 1)
	a.Objects.(*dynamicfake.FakeDynamicClient).PrependReactor("create", "reboots", func(action k8stesting.Action) (bool, runtime.Object, error) {
		created <- action.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		return false, nil, nil
	})
	stop := remediator(t, a, a.Kube, "boot-2")
	defer stop()
	res, err := run(nodeInput(nodeStep("", time.Minute)))
	if err != nil || !res.Passed || res.Busy || !strings.Contains(res.Reason, "node node-1 booted again (boot ID boot-2, was boot-1) and is Ready") {
		t.Fatalf("result %+v, %v", res, err)
	}
	obj := <-created
	ann := obj.GetAnnotations()
	if !strings.HasPrefix(obj.GetName(), "devicewarden-reboot-") || ann[kubeobj.AnnotationBootID] != "boot-1" || ann[kubeobj.AnnotationRepairTry] != "2" ||
		ann[kubeobj.AnnotationWorkflow] != gpu3.WorkflowID() || ann[kubeobj.AnnotationDevice] != gpu3.String() || obj.GetLabels()[kubeobj.LabelManagedBy] != kubeobj.ManagedBy {
		t.Fatalf("object %s %v %v", obj.GetName(), ann, obj.GetLabels())
	}
	if node, _, _ := unstructured.NestedString(obj.Object, "spec", "node"); node != "node-1" {
		t.Fatalf("template rendered as %v", obj.Object)
	}
	if left, _ := a.Objects.Resource(rebootGVR).List(context.Background(), metav1.ListOptions{}); len(left.Items) != 0 {
		t.Fatalf("%d objects left", len(left.Items))
	}
	if n := testutil.ToFloat64(a.Metrics.RepairTries.WithLabelValues("node", "passed")); n != 1 {
		t.Fatalf("tries passed = %v", n)
	}
	wantTryEvent(t, a.Kube, corev1.EventTypeNormal, "repair step node (try 2) on "+gpu3.String()+" passed: node node-1 booted again")
}

// wantTryEvent finds the one repair Event on node-1, of the type and with the message's start.
func wantTryEvent(t *testing.T, kube kubernetes.Interface, typ, msg string) {
	t.Helper()
	evs, err := kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs.Items {
		if e.Reason == kubeobj.EventRepairTry && e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == "node-1" {
			got = append(got, e.Type+" "+e.Message)
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], typ+" "+msg) {
		t.Fatalf("repair events %q, want one %s %q", got, typ, msg)
	}
}

// A node that never boots again, or boots but is not Ready, fails the step at its timeout.
func TestNodeStepFailsAtItsTimeout(t *testing.T) {
	for _, tt := range []struct {
		name  string
		ready bool
		boot  string
	}{{"no reboot", true, ""}, {"rebooted, not Ready", false, "boot-2"}} {
		t.Run(tt.name, func(t *testing.T) {
			a, run := nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
			if tt.boot != "" {
				_, _ = a.Kube.CoreV1().Nodes().UpdateStatus(context.Background(), rebootNode("node-1", tt.boot, tt.ready), metav1.UpdateOptions{})
				// The boot ID recorded is the one before the object: pretend the reboot came after.
				a.Objects.(*dynamicfake.FakeDynamicClient).PrependReactor("create", "reboots", func(action k8stesting.Action) (bool, runtime.Object, error) {
					obj := action.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
					ann := obj.GetAnnotations()
					ann[kubeobj.AnnotationBootID] = "boot-1"
					obj.SetAnnotations(ann)
					return false, nil, nil
				})
			}
			res, err := run(nodeInput(nodeStep("", 200*time.Millisecond)))
			if err != nil || res.Passed || res.Busy || !strings.Contains(res.Reason, "did not boot again and turn Ready within 200ms") {
				t.Fatalf("result %+v, %v", res, err)
			}
			if left, _ := a.Objects.Resource(rebootGVR).List(context.Background(), metav1.ListOptions{}); len(left.Items) != 0 {
				t.Fatalf("%d objects left after the timeout", len(left.Items))
			}
			wantTryEvent(t, a.Kube, corev1.EventTypeWarning, "repair step node (try 2) on "+gpu3.String()+" failed: node node-1 did not boot again")
		})
	}
}

// Another Pod on the node that holds a device holds the step back (a reboot would end it), unless
// the step leaves holders to the remediator; Pods elsewhere, finished Pods and DeviceWarden's own
// checks do not.
func TestNodeStepWaitsForTheNodesOtherHolders(t *testing.T) {
	pod := func(name, node string, phase corev1.PodPhase, claims bool, labels map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Labels: labels}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if claims {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
		}
		return p
	}
	quiet := []runtime.Object{rebootNode("node-1", "boot-1", true),
		pod("elsewhere", "node-2", corev1.PodRunning, true, nil),
		pod("done", "node-1", corev1.PodSucceeded, true, nil),
		pod("cpu-only", "node-1", corev1.PodRunning, false, nil),
		pod("probe", "node-1", corev1.PodRunning, true, map[string]string{kubeobj.LabelCheck: "x"})}
	holder := pod("train", "node-1", corev1.PodRunning, true, nil)
	plugin := pod("plugin", "node-1", corev1.PodPending, false, nil)
	plugin.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}

	for _, h := range []*corev1.Pod{holder, plugin} {
		a, run := nodeEnv(t, true, append(quiet, h)...)
		res, err := run(nodeInput(nodeStep("", time.Minute)))
		if err != nil || !res.Busy || !strings.Contains(res.Reason, "node node-1 still runs Pod team/"+h.Name+", which holds a device") {
			t.Fatalf("%s: result %+v, %v", h.Name, res, err)
		}
		if left, _ := a.Objects.Resource(rebootGVR).List(context.Background(), metav1.ListOptions{}); len(left.Items) != 0 {
			t.Fatalf("%s: a reboot was asked for under a holder", h.Name)
		}
	}

	a, run := nodeEnv(t, true, append(quiet, holder)...)
	stop := remediator(t, a, a.Kube, "boot-2")
	defer stop()
	step := nodeStep("", time.Minute)
	step.Holders = policy.HoldersRemediator
	if res, err := run(nodeInput(step)); err != nil || !res.Passed {
		t.Fatalf("holders left to the remediator: %+v, %v", res, err)
	}
}

// An object of the template's name that is not this try's (a remediation already under way) is
// left alone; this try's own object, found by a retried activity, is adopted with the boot ID it
// recorded, so a reboot that happened meanwhile counts.
func TestNodeStepAdoptsOnlyItsOwnObject(t *testing.T) {
	other := &unstructured.Unstructured{}
	other.SetAPIVersion("remediation.example.com/v1")
	other.SetKind("Reboot")
	other.SetName("node-1")
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-2", true))
	if _, err := a.Objects.Resource(rebootGVR).Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := run(nodeInput(nodeStep("{{ .Node }}", time.Minute)))
	if err != nil || !res.Busy || !strings.Contains(res.Reason, "Reboot node-1 already stands and is not this try's") {
		t.Fatalf("someone else's object: %+v, %v", res, err)
	}
	if _, err := a.Objects.Resource(rebootGVR).Get(context.Background(), "node-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("someone else's object was touched: %v", err)
	}

	other.SetAnnotations(map[string]string{kubeobj.AnnotationWorkflow: gpu3.WorkflowID(), kubeobj.AnnotationRepairTry: "2", kubeobj.AnnotationBootID: "boot-1"})
	if _, err := a.Objects.Resource(rebootGVR).Update(context.Background(), other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = run(nodeInput(nodeStep("{{ .Node }}", time.Minute)))
	if err != nil || !res.Passed || !strings.Contains(res.Reason, "boot ID boot-2, was boot-1") {
		t.Fatalf("own object: %+v, %v", res, err)
	}
}

// Without a remediator's API, or a node's boot ID, the step does nothing it cannot judge: no
// remediator waits (the device is not called broken for it); no boot ID fails the try.
func TestNodeStepWithoutRemediatorOrBootID(t *testing.T) {
	_, run := nodeEnv(t, false, rebootNode("node-1", "boot-1", true))
	res, err := run(nodeInput(nodeStep("", time.Minute)))
	if err != nil || !res.Busy || !strings.Contains(res.Reason, "no API serves remediation.example.com/v1 Reboot") {
		t.Fatalf("no remediator: %+v, %v", res, err)
	}
	a, run := nodeEnv(t, true, rebootNode("node-1", "", true))
	res, err = run(nodeInput(nodeStep("", time.Minute)))
	if err != nil || res.Passed || res.Busy || !strings.Contains(res.Reason, "node node-1 reports no boot ID") {
		t.Fatalf("no boot ID: %+v, %v", res, err)
	}
	if left, _ := a.Objects.Resource(rebootGVR).List(context.Background(), metav1.ListOptions{}); len(left.Items) != 0 {
		t.Fatal("a reboot was asked for that could not be told")
	}
	in := nodeInput(nodeStep("", time.Minute))
	in.Node = ""
	if res, err = run(in); err != nil || res.Passed || !strings.Contains(res.Reason, "names no node") {
		t.Fatalf("no node: %+v, %v", res, err)
	}
}
