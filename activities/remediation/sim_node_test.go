package remediation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// TestSimulateNodeSteps runs the real node step (RemediateNode) through generated sequences on two
// nodes whose names may share their first 63 characters: earlier quarantines' objects of the same
// workflow left standing (a delete that failed, a finalizer that holds one), the other node's step
// under way (its object and its fences), nodes that reboot by themselves, remediators that reboot
// at once or never, and quarantines that start again. After every step:
//   - a step that passed saw its own node boot after the boot its quarantine last saw (the try's
//     start, or the boot an earlier try of the same quarantine recorded);
//   - a step never removes the other node's object or fences.
//
// make simulate runs it longer (SIM_SEAMS: NodeSteps).
func TestSimulateNodeSteps(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { newNodeSim(t, rapid.Bool().Draw(rt, "long names")).run(rt) })
}

// nodeSim is one cluster of two nodes, x (whose device's steps run) and y (another device's step
// may stand on it), and what the model knows of them.
type nodeSim struct {
	ctx       context.Context
	a         *Activities
	remediate func(NodeInput) (decide.StepResult, error)
	x, y      string
	mu        sync.Mutex
	// boots are each node's boot IDs, oldest first; the last is the node's now.
	boots map[string][]string
	// rebootOnAsk: the remediator reboots the node of an object created for it (else never).
	rebootOnAsk bool
	stuck       map[string]bool // objects a finalizer keeps: a delete leaves them standing
	// the quarantine of x's device: its start, its next try, and the boot its last try recorded.
	start    time.Time
	try      int
	bootSeen string
	// yStands: the other device's step stands on y (its object and its fences).
	yStands bool
	clock   time.Time
}

var simDriver = "gpu.example.com"

func newNodeSim(t *testing.T, long bool) *nodeSim {
	x, y := "node-x", "node-y"
	if long {
		prefix := strings.Repeat("rack-7-row-3-", 5)[:63]
		x, y = prefix+"-x", prefix+"-y"
	}
	s := &nodeSim{ctx: context.Background(), x: x, y: y, boots: map[string][]string{x: {"x-1"}, y: {"y-1"}}, stuck: map[string]bool{},
		clock: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	objs := []runtime.Object{rebootNode(x, "x-1", true), rebootNode(y, "y-1", true)}
	for _, n := range []string{x, y} {
		objs = append(objs, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n + "-slice"},
			Spec: resourcev1.ResourceSliceSpec{Driver: simDriver, NodeName: ptr.To(n), Pool: resourcev1.ResourcePool{Name: n, ResourceSliceCount: 1}}})
	}
	a, run := nodeEnv(t, true, objs...)
	a.CheckPoll = time.Millisecond
	s.a, s.remediate = a, run
	fd := a.Objects.(*dynamicfake.FakeDynamicClient)
	fd.PrependReactor("create", "reboots", func(action k8stesting.Action) (bool, runtime.Object, error) {
		u := action.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		node, _, _ := unstructured.NestedString(u.Object, "spec", "node")
		s.mu.Lock()
		reboot := s.rebootOnAsk
		s.mu.Unlock()
		if reboot {
			s.reboot(t, node) // the remediator reboots the node the object names, in full
		}
		return false, nil, nil
	})
	fd.PrependReactor("delete", "reboots", func(action k8stesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.stuck[action.(k8stesting.DeleteAction).GetName()], nil, nil
	})
	return s
}

// reboot gives node a new boot ID.
func (s *nodeSim) reboot(t interface{ Errorf(string, ...any) }, node string) {
	s.mu.Lock()
	b := s.boots[node]
	id := fmt.Sprintf("%s-%d", node[len(node)-1:], len(b)+1)
	s.boots[node] = append(b, id)
	s.mu.Unlock()
	n, err := s.a.Kube.CoreV1().Nodes().Get(s.ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Errorf("get node %s: %v", node, err)
		return
	}
	n.Status.NodeInfo.BootID = id
	if _, err := s.a.Kube.CoreV1().Nodes().UpdateStatus(s.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Errorf("reboot node %s: %v", node, err)
	}
}

// bootIndex is where id stands in node's boots (-1: not one of its boots).
func (s *nodeSim) bootIndex(node, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Index(s.boots[node], id)
}

func (s *nodeSim) now(node string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boots[node]
	return b[len(b)-1]
}

func (s *nodeSim) run(rt *rapid.T) {
	s.newQuarantine()
	for i := range rapid.IntRange(1, 12).Draw(rt, "steps") {
		switch rapid.SampledFrom([]string{"step", "step", "step", "stale", "other", "reboot", "quarantine"}).Draw(rt, fmt.Sprintf("move%d", i)) {
		case "stale":
			// An earlier quarantine's try of this device's workflow left its object standing.
			s.leaveObject(rt, s.x, devX.WorkflowID(), rapid.IntRange(1, 3).Draw(rt, "stale try"), s.start.Add(-time.Hour),
				rapid.Bool().Draw(rt, "stale stuck"))
		case "other":
			if !s.yStands {
				s.leaveObject(rt, s.y, devY.WorkflowID(), 1, s.clock, false)
				if _, err := (nodeSteps{s.a}).fenceNode(s.ctx, NodeInput{Device: devY, Node: s.y, WorkflowID: devY.WorkflowID()}); err != nil {
					rt.Fatal(err)
				}
				s.yStands = true
			}
		case "reboot":
			s.reboot(rt, rapid.SampledFrom([]string{s.x, s.y}).Draw(rt, "rebooted"))
		case "quarantine":
			s.newQuarantine()
		case "step":
			s.step(rt)
		}
	}
}

var devX, devY = device.ID{Driver: simDriver, Pool: "node-x", Device: "gpu-0"}, device.ID{Driver: simDriver, Pool: "node-y", Device: "gpu-0"}

func (s *nodeSim) newQuarantine() {
	s.clock = s.clock.Add(time.Hour)
	s.start, s.try, s.bootSeen = s.clock, 1, ""
}

// leaveObject puts a node step's object on node as workflow wf's try would have written it,
// with the node's boot ID before its last reboot when it has one.
func (s *nodeSim) leaveObject(rt *rapid.T, node, wf string, try int, tryAt time.Time, stuck bool) {
	boot := s.now(node)
	s.mu.Lock()
	if b := s.boots[node]; len(b) > 1 {
		boot = b[len(b)-2]
	}
	s.mu.Unlock()
	name := "devicewarden-reboot-" + sha16(node)
	if _, err := s.a.Objects.Resource(rebootGVR).Get(s.ctx, name, metav1.GetOptions{}); err == nil {
		return // one stands already
	}
	u := rebootObject(name, node, wf, fmt.Sprint(try), tryAt.UTC().Format(time.RFC3339Nano), boot)
	if _, err := s.a.Objects.Resource(rebootGVR).Create(s.ctx, u, metav1.CreateOptions{}); err != nil {
		rt.Fatal(err)
	}
	s.mu.Lock()
	s.stuck[name] = stuck
	s.mu.Unlock()
}

// step runs the try of x's device and holds the invariants.
func (s *nodeSim) step(rt *rapid.T) {
	s.mu.Lock()
	s.rebootOnAsk = rapid.Bool().Draw(rt, "remediator reboots")
	s.mu.Unlock()
	s.clock = s.clock.Add(time.Minute)
	tryAt := s.clock
	if s.try == 1 {
		tryAt = s.start
	}
	floor := s.bootIndex(s.x, s.now(s.x)) // the boot at the try's start
	if s.bootSeen != "" {
		floor = s.bootIndex(s.x, s.bootSeen)
	}
	in := NodeInput{Device: devX, Node: s.x, Step: nodeStep("", 5*time.Millisecond), Try: s.try, TryAt: tryAt, BootSeen: s.bootSeen,
		WorkflowID: devX.WorkflowID()}
	res, err := s.remediate(in)
	if err != nil {
		rt.Fatalf("node step: %v", err)
	}
	if res.Passed {
		if at := s.bootIndex(s.x, res.BootID); at <= floor {
			rt.Fatalf("try %d passed on boot ID %q, but node %s has not booted since %q (its boots %v): %s", s.try, res.BootID, s.x,
				s.boots[s.x][floor], s.boots[s.x], res.Reason)
		}
	}
	if s.yStands {
		name := "devicewarden-reboot-" + sha16(s.y)
		if _, err := s.a.Objects.Resource(rebootGVR).Get(s.ctx, name, metav1.GetOptions{}); err != nil {
			rt.Fatalf("node %s's step removed node %s's object: %v", s.x, s.y, err)
		}
		rules, err := s.a.Kube.ResourceV1().DeviceTaintRules().Get(s.ctx, fenceName(s.y, simDriver, s.y), metav1.GetOptions{})
		if err != nil || rules.Annotations[kubeobj.AnnotationWorkflow] != devY.WorkflowID() {
			rt.Fatalf("node %s's step removed node %s's fence: %v", s.x, s.y, err)
		}
	}
	if res.BootID != "" {
		s.bootSeen = res.BootID
	}
	if !res.Busy {
		s.try++
	}
}

// TestSimulateResetRetries runs the real reset (RunCheck of kind repair) through generated
// sequences of tries whose attempts fail on transient API errors at generated points, each try
// retried as the workflow retries it (three attempts). After every try:
//   - the try created at most one reset Pod: a retried attempt adopts the running one;
//   - a try that ended (passed or failed) left no reset Pod behind.
//
// make simulate runs it longer (SIM_SEAMS: ResetRetries).
func TestSimulateResetRetries(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		env, a, kube := activityEnv(t, gpuSlice(), rebootNode("node-1", "boot-1", true))
		a.CheckPoll = 5 * time.Millisecond
		name := CheckName(decide.ActRepair, gpu3)
		var mu sync.Mutex
		var creates, gets int
		var failAt []int
		kube.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
			if _, err := kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "checks", name); apierrors.IsNotFound(err) {
				mu.Lock()
				creates++ // a create of one that stands changes nothing
				mu.Unlock()
			}
			return false, nil, nil
		})
		kube.PrependReactor("get", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
			if action.(k8stesting.GetAction).GetName() != name {
				return false, nil, nil
			}
			mu.Lock()
			defer mu.Unlock()
			gets++
			if slices.Contains(failAt, gets) {
				return true, nil, apierrors.NewServerTimeout(corev1.Resource("pods"), "get", 1)
			}
			return false, nil, nil
		})
		stop := kubelet(kube, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy)
		defer stop()
		for try := range rapid.IntRange(1, 3).Draw(rt, "tries") {
			mu.Lock()
			creates, gets, failAt = 0, 0, nil
			for range rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("errors%d", try)) {
				failAt = append(failAt, rapid.IntRange(1, 6).Draw(rt, fmt.Sprintf("failing get%d", try)))
			}
			mu.Unlock()
			in := checkIn(decide.ActRepair)
			in.Idle, in.Step, in.Attempts, in.Review = []device.ID{gpu3}, "reset", 3, try+1
			ended := false
			for range in.Attempts {
				if _, err := env.ExecuteActivity(a.RunCheck, in); err == nil {
					ended = true
					break
				}
			}
			mu.Lock()
			n := creates
			mu.Unlock()
			if n > 1 {
				rt.Fatalf("try %d created %d reset Pods", try+1, n)
			}
			if _, err := kube.CoreV1().Pods("checks").Get(context.Background(), name, metav1.GetOptions{}); ended && err == nil {
				rt.Fatalf("try %d ended and left its reset Pod", try+1)
			}
		}
	})
}
