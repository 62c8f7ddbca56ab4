package remediation

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/activities/activitytest"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// releases is a BreakerClient that grants every permit and records the node permits given back.
type releases struct {
	mu   sync.Mutex
	reqs []breaker.PermitRequest
	rels []breaker.PermitRelease
}

func (r *releases) Acquire(_ context.Context, req breaker.PermitRequest) (breaker.PermitResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	return breaker.PermitResult{Granted: true}, nil
}

func (r *releases) Release(rel breaker.PermitRelease) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rels = append(r.rels, rel)
	return nil
}

// siblingStep is another device's node step of node-1 under way, as its try left it.
func siblingStep(t *testing.T, a *Activities, name string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("remediation.example.com/v1")
	u.SetKind("Reboot")
	u.SetName(name)
	if err := unstructured.SetNestedField(u.Object, "node-1", "spec", "node"); err != nil {
		t.Fatal(err)
	}
	other := device.ID{Driver: gpu3.Driver, Pool: gpu3.Pool, Device: "gpu-7"}
	mark(u, NodeInput{Device: other, Node: "node-1", Try: 1, WorkflowID: other.WorkflowID()}, "boot-1")
	if _, err := a.Objects.Resource(rebootGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A second device of a node whose reboot another device's step asked for waits for that reboot:
// one reboot serves both, this step creates nothing and deletes nothing of the other's.
func TestNodeStepJoinsAnotherDevicesReboot(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	siblingStep(t, a, "devicewarden-reboot-other")
	stop := remediator(t, a, a.Kube, "boot-2")
	defer stop()
	res, err := run(nodeInput(nodeStep("", 5*time.Second)))
	if err != nil || !res.Passed || !strings.Contains(res.Reason, "boot ID boot-2, was boot-1") || !strings.Contains(res.Reason, "joined another device's node step") {
		t.Fatalf("result %+v, %v", res, err)
	}
	list, _ := a.Objects.Resource(rebootGVR).List(context.Background(), metav1.ListOptions{})
	if len(list.Items) != 1 || list.Items[0].GetName() != "devicewarden-reboot-other" {
		t.Fatalf("objects after joining: %v", list.Items)
	}
	wantTryEvent(t, a.Kube, corev1.EventTypeNormal, "repair step node (try 2) on "+gpu3.String()+" passed")
}

// A template that names its object after the node (SelfNodeRemediation does): the same name,
// another device's try, is joined too; someone else's object of that name is not.
func TestNodeStepJoinsByTheTemplatesName(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	siblingStep(t, a, "node-1")
	stop := remediator(t, a, a.Kube, "boot-2")
	defer stop()
	if res, err := run(nodeInput(nodeStep("{{ .Node }}", 5*time.Second))); err != nil || !res.Passed || !strings.Contains(res.Reason, "joined") {
		t.Fatalf("result %+v, %v", res, err)
	}
}

// The joined step ended without a reboot (its owner failed or gave up): this try is taken again
// later rather than failed. Ended after the reboot (its owner saw the node back first): passed,
// and no second reboot is asked for.
func TestNodeStepWhoseJoinedStepEnded(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	siblingStep(t, a, "devicewarden-reboot-other")
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = a.Objects.Resource(rebootGVR).Delete(context.Background(), "devicewarden-reboot-other", metav1.DeleteOptions{})
	}()
	res, err := run(nodeInput(nodeStep("", 5*time.Second)))
	if err != nil || !res.Busy || !strings.Contains(res.Reason, "ended before node node-1 booted again") {
		t.Fatalf("ended without a reboot: %+v, %v", res, err)
	}

	a, run = nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	siblingStep(t, a, "devicewarden-reboot-other")
	// Between this step's read of the node and of the object, the node came back and the owner
	// deleted its object: the boot ID is read again.
	var once sync.Once
	a.Objects.(*dynamicfake.FakeDynamicClient).PrependReactor("get", "reboots", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.GetAction).GetName() != "devicewarden-reboot-other" {
			return false, nil, nil
		}
		once.Do(func() {
			if _, err := a.Kube.CoreV1().Nodes().UpdateStatus(context.Background(), rebootNode("node-1", "boot-2", true), metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		})
		return true, nil, apierrors.NewNotFound(rebootGVR.GroupResource(), "devicewarden-reboot-other")
	})
	res, err = run(nodeInput(nodeStep("", 5*time.Second)))
	if err != nil || !res.Passed || !strings.Contains(res.Reason, "boot ID boot-2, was boot-1") {
		t.Fatalf("ended after the reboot: %+v, %v", res, err)
	}
	if list, _ := a.Objects.Resource(rebootGVR).List(context.Background(), metav1.ListOptions{}); len(list.Items) != 1 {
		t.Fatalf("a second reboot was asked for: %d objects", len(list.Items))
	}
}

// The node's permit goes back once the step ended, passed or busy; a step that failed to run
// (an error the activity's retry takes) keeps it, for the retry holds the node still.
func TestNodeStepGivesItsPermitBack(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	r := &releases{}
	a.Breaker = r
	stop := remediator(t, a, a.Kube, "boot-2")
	if res, err := run(nodeInput(nodeStep("", 5*time.Second))); err != nil || !res.Passed {
		t.Fatalf("result %+v, %v", res, err)
	}
	stop()
	want := breaker.PermitRelease{Key: "node:node-1", Holder: gpu3.String()}
	if len(r.rels) != 1 || r.rels[0] != want {
		t.Fatalf("released %+v, want %+v", r.rels, want)
	}

	a, run = nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	a.Breaker = r
	a.Kube.(*fake.Clientset).PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver gone")
	})
	if _, err := run(nodeInput(nodeStep("", 5*time.Second))); err == nil {
		t.Fatal("a failed list of the node's Pods did not fail the activity")
	}
	if len(r.rels) != 1 {
		t.Fatalf("a step that did not end gave its permit back: %+v", r.rels)
	}
}

// A node step's permit request names the node, its node pool from the node's labels, and the hold.
func TestNodePermitNamesTheNodePool(t *testing.T) {
	node := rebootNode("node-1", "boot-1", true)
	node.Labels = map[string]string{"karpenter.sh/nodepool": "h100"}
	env, a, _ := activityEnv(t, node)
	r := &releases{}
	a.Breaker, a.BreakerConfig = r, breaker.Config{Window: time.Minute, MaxCount: 4}
	if _, err := env.ExecuteActivity(a.AcquirePermit, PermitInput{Device: gpu3, Action: breaker.Reboot, Node: "node-1", Hold: time.Hour}); err != nil {
		t.Fatal(err)
	}
	a.NodePoolLabels = []string{"rack"}
	if _, err := env.ExecuteActivity(a.AcquirePermit, PermitInput{Device: gpu3, Action: breaker.Reboot, Node: "node-1"}); err != nil {
		t.Fatal(err)
	}
	if len(r.reqs) != 2 || r.reqs[0].Node != "node-1" || r.reqs[0].NodePool != "h100" || r.reqs[0].Hold != time.Hour || r.reqs[1].NodePool != "" {
		t.Fatalf("requests %+v", r.reqs)
	}
	if _, err := env.ExecuteActivity(a.AcquirePermit, PermitInput{Device: gpu3, Action: breaker.Reboot, Node: "node-9"}); err == nil || !strings.Contains(err.Error(), "node node-9 no longer exists") {
		t.Fatalf("a node that is not there: %v", err)
	}
}

// A node that booted again since the quarantine's last try saw it (another device's step, a
// person) needs no reboot: the step passes without asking for one, and the review proves the
// device. A node not booted since is asked for its reboot as usual.
func TestNodeStepSeesARebootSinceItsLastTry(t *testing.T) {
	a, run := nodeEnv(t, true, rebootNode("node-1", "boot-2", true))
	in := nodeInput(nodeStep("", 5*time.Second))
	in.BootSeen = "boot-1"
	res, err := run(in)
	if err != nil || !res.Passed || res.BootID != "boot-2" || !strings.Contains(res.Reason, "booted again since this device's last try (boot ID boot-2, was boot-1)") {
		t.Fatalf("result %+v, %v", res, err)
	}
	if list, _ := a.Objects.Resource(rebootGVR).List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatalf("a reboot was asked for: %v", list.Items)
	}
	in.BootSeen = "boot-2"
	stop := remediator(t, a, a.Kube, "boot-3")
	defer stop()
	if res, err := run(in); err != nil || !res.Passed || res.BootID != "boot-3" || !strings.Contains(res.Reason, "was boot-2") {
		t.Fatalf("not booted since: %+v, %v", res, err)
	}
}

// Two devices of one node whose steps race: one object, one reboot, both passed on it.
func TestTwoDevicesOfANodeAskOnce(t *testing.T) {
	a, _ := nodeEnv(t, true, rebootNode("node-1", "boot-1", true))
	names := map[string]bool{}
	var mu sync.Mutex
	a.Objects.(*dynamicfake.FakeDynamicClient).PrependReactor("create", "reboots", func(action k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		names[action.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured).GetName()] = true
		mu.Unlock()
		return false, nil, nil
	})
	other := device.ID{Driver: gpu3.Driver, Pool: gpu3.Pool, Device: "gpu-7"}
	first, second := nodeInput(nodeStep("", 5*time.Second)), nodeInput(nodeStep("", 5*time.Second))
	second.Device, second.WorkflowID = other, other.WorkflowID()
	type out struct {
		res decide.StepResult
		err error
	}
	done := make(chan out, 2)
	for _, in := range []NodeInput{first, second} {
		// A test activity environment runs one activity at a time: each step gets its own, over
		// the same activities and clusters, as two workers would.
		env := activitytest.Env(a)
		go func() {
			var res decide.StepResult
			v, err := env.ExecuteActivity(a.RemediateNode, in)
			if err == nil {
				err = v.Get(&res)
			}
			done <- out{res, err}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	stop := remediator(t, a, a.Kube, "boot-2")
	defer stop()
	for range 2 {
		o := <-done
		if o.err != nil || !o.res.Passed || o.res.BootID != "boot-2" {
			t.Fatalf("result %+v, %v", o.res, o.err)
		}
	}
	if len(names) != 1 {
		t.Fatalf("objects asked for one node: %v", names)
	}
}
