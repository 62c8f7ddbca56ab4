package rollouts

import (
	"context"
	"github.com/devicewarden/devicewarden/api"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// TestExpectedLeavesOutNodesThePluginNeverAdvertised: a node with no plugin devices recorded at
// enable says nothing about its hardware, so the drift gate must not expect 0 devices there.
func TestExpectedLeavesOutNodesThePluginNeverAdvertised(t *testing.T) {
	c := rolloutplan.PhaseChange{Nodes: []rolloutplan.NodeChange{{Node: "a", PluginDevices: 8}, {Node: "b"}}}
	got := c.Expected()
	if len(got) != 1 || got["a"] != 8 {
		t.Fatalf("expected = %v", got)
	}
}

const (
	owner   = "devicewarden.io/device-owner"
	plugRes = "x.io/gpu"
	drv     = "gpu.example.com"
)

func rolloutPlan() rolloutplan.Plan {
	return rolloutplan.Plan{Name: "r", OwnerLabel: owner, Plugin: "plugin", DRA: "dra", PluginResource: plugRes,
		Phases: []rolloutplan.Phase{{Name: "a", Nodes: "pool=a", Classes: []rolloutplan.Class{{Name: "gpu", Driver: drv}}, Namespaces: []string{"t"}}}}
}

func poolNode(name string, labels map[string]string, gpus int64) *corev1.Node {
	l := map[string]string{"pool": "a"}
	for k, v := range labels {
		l[k] = v
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	if gpus > 0 {
		n.Status.Allocatable = corev1.ResourceList{plugRes: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	return n
}

func driverSlice(node, driver string, devices int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node}}}
	for i := 0; i < devices; i++ {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "gpu-" + string(rune('0'+i))})
	}
	return s
}

// TestEnableRecordsThePreviousOwnerOnce: enable switches the label, records what was there and the
// plugin's devices; a retry after the switch keeps that record (not "dra", not 0 devices).
func TestEnableRecordsThePreviousOwnerOnce(t *testing.T) {
	env, a, kube := activityEnv(t, poolNode("n1", map[string]string{owner: "plugin"}, 8), poolNode("n2", nil, 0),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"pool": "b", owner: "plugin"}}})
	in := PhaseInput{Plan: rolloutPlan()}
	var first, retry rolloutplan.PhaseChange
	v, err := env.ExecuteActivity(a.EnableRolloutPhase, in)
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Get(&first)
	if len(first.Nodes) != 2 || len(first.CreatedClasses) != 1 {
		t.Fatalf("first = %+v", first)
	}
	byNode := map[string]rolloutplan.NodeChange{}
	for _, n := range first.Nodes {
		byNode[n.Node] = n
	}
	if n := byNode["n1"]; n.Previous != "plugin" || !n.HadLabel || n.PluginDevices != 8 {
		t.Errorf("n1 = %+v", n)
	}
	if n := byNode["n2"]; n.HadLabel || n.Previous != "" {
		t.Errorf("n2 = %+v", n)
	}
	ctx := context.Background()
	for _, name := range []string{"n1", "n2"} {
		n, _ := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if n.Labels[owner] != "dra" || !strings.HasPrefix(n.Annotations[kubeobj.AnnotationRolloutPrevious], "r/") {
			t.Errorf("%s after enable: labels %v annotations %v", name, n.Labels, n.Annotations)
		}
	}
	if n, _ := kube.CoreV1().Nodes().Get(ctx, "other", metav1.GetOptions{}); n.Labels[owner] != "plugin" {
		t.Errorf("a node outside the phase was switched")
	}
	// The plugin withdrew its resource after the switch; a retried enable still knows 8.
	n1, _ := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	n1.Status.Allocatable = nil
	if _, err := kube.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err = env.ExecuteActivity(a.EnableRolloutPhase, in)
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Get(&retry)
	for _, n := range retry.Nodes {
		if n.Node == "n1" && (n.Previous != "plugin" || !n.HadLabel || n.PluginDevices != 8) {
			t.Errorf("retry n1 = %+v", n)
		}
		if n.Node == "n2" && n.HadLabel {
			t.Errorf("retry n2 = %+v", n)
		}
	}
	if len(retry.CreatedClasses) != 0 {
		t.Errorf("retry created %v again", retry.CreatedClasses)
	}
	evs, _ := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if len(evs.Items) != 2 {
		t.Errorf("%d events, want one per switched node (none on the retry)", len(evs.Items))
	}

	// Undo puts back exactly what was there: n1 plugin, n2 no label.
	undo := UndoInput{Rollout: "r", OwnerLabel: owner, Change: first, Drivers: []string{drv}, Reason: "test"}
	var res UndoResult
	v, err = env.ExecuteActivity(a.UndoRolloutPhase, undo)
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Get(&res)
	if len(res.Returned) != 2 || len(res.Held) != 0 {
		t.Fatalf("undo = %+v", res)
	}
	n1, _ = kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	n2, _ := kube.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	if n1.Labels[owner] != "plugin" || n1.Annotations[kubeobj.AnnotationRolloutPrevious] != "" {
		t.Errorf("n1 after undo: %v %v", n1.Labels, n1.Annotations)
	}
	if _, ok := n2.Labels[owner]; ok || n2.Annotations[kubeobj.AnnotationRolloutDevices] != "" {
		t.Errorf("n2 after undo: %v %v", n2.Labels, n2.Annotations)
	}
}

// TestUndoHoldsANodeWithBoundClaims: a node whose DRA devices back an allocated claim stays where
// it is; another driver's allocation or an unallocated claim holds nothing.
func TestUndoHoldsANodeWithBoundClaims(t *testing.T) {
	bound := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "t"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Driver: drv, Pool: "n1", Device: "gpu-0"}, {Driver: drv, Pool: "n1", Device: "gpu-1"}}}}}}
	otherDriver := bound.DeepCopy()
	otherDriver.Name = "o"
	otherDriver.Status.Allocation.Devices.Results = []resourcev1.DeviceRequestAllocationResult{{Driver: "nic.example.com", Pool: "n2", Device: "x"}}
	pending := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "t"}}
	env, a, kube := activityEnv(t, poolNode("n1", map[string]string{owner: "dra"}, 0), poolNode("n2", map[string]string{owner: "dra"}, 0),
		driverSlice("n1", drv, 2), driverSlice("n2", drv, 2), driverSlice("n2", "nic.example.com", 1), bound, otherDriver, pending)
	ch := rolloutplan.PhaseChange{Phase: "a", Nodes: []rolloutplan.NodeChange{{Node: "n1", Previous: "plugin", HadLabel: true}, {Node: "n2", Previous: "plugin", HadLabel: true}}}
	v, err := env.ExecuteActivity(a.UndoRolloutPhase, UndoInput{Rollout: "r", OwnerLabel: owner, Change: ch, Drivers: []string{drv}})
	if err != nil {
		t.Fatal(err)
	}
	var res UndoResult
	_ = v.Get(&res)
	if len(res.Held) != 1 || res.Held[0].Node != "n1" || res.Held[0].Claims != 1 || len(res.Returned) != 1 || res.Returned[0] != "n2" {
		t.Fatalf("undo = %+v", res)
	}
	if n, _ := kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{}); n.Labels[owner] != "dra" {
		t.Errorf("held node switched: %v", n.Labels)
	}
}

func TestBlockNewClaimsIsIdempotentAndLifted(t *testing.T) {
	env, a, kube := activityEnv(t)
	a.Metrics = metrics.New()
	in := api.BlockInput{Rollout: "r", Phase: "a", Classes: []string{"gpu", "gpu-big"}, Reason: "gate failed"}
	for i := 0; i < 2; i++ {
		if _, err := env.ExecuteActivity(a.BlockNewClaims, in); err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
	}
	ctx := context.Background()
	pol, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, kubeobj.BlockName("r", "a"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expr := pol.Spec.Validations[0].Expression
	for _, want := range []string{`["gpu", "gpu-big"]`, "r.exactly.deviceClassName in", "s.deviceClassName in", "!has(object.spec.devices)"} {
		if !strings.Contains(expr, want) {
			t.Errorf("expression lacks %q: %s", want, expr)
		}
	}
	if msg := pol.Spec.Validations[0].Message; !strings.Contains(msg, "rolled back (gate failed)") || !strings.Contains(msg, "gpu, gpu-big") {
		t.Errorf("message = %q", msg)
	}
	if r := pol.Spec.MatchConstraints.ResourceRules[0]; r.Resources[0] != "resourceclaims" || r.Operations[0] != "CREATE" {
		t.Errorf("rule = %+v", r)
	}
	b, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, kubeobj.BlockName("r", "a"), metav1.GetOptions{})
	if err != nil || b.Spec.PolicyName != pol.Name || b.Spec.ValidationActions[0] != "Deny" {
		t.Fatalf("binding = %+v (%v)", b, err)
	}
	if n := testutil.ToFloat64(a.Metrics.RolloutRollbacks); n != 1 {
		t.Errorf("rollbacks counted %v times for one rollback blocked twice", n)
	}
	for i := 0; i < 2; i++ {
		if _, err := env.ExecuteActivity(a.UnblockNewClaims, in); err != nil {
			t.Fatalf("unblock %d: %v", i, err)
		}
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, pol.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("policy after unblock: %v", err)
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, pol.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("binding after unblock: %v", err)
	}
}

func TestRolloutSnapshotKeepsThePhase(t *testing.T) {
	shared := driverSlice("n1", drv, 2)
	shared.Spec.Devices[0].AllowMultipleAllocations = ptr.To(true)
	shared.Spec.Devices[0].Capacity = map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi")}}
	_, a, _ := activityEnv(t, poolNode("n1", map[string]string{owner: "dra"}, 0), poolNode("n2", map[string]string{owner: "plugin"}, 4),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "far", Labels: map[string]string{"pool": "b"}}},
		shared, driverSlice("far", drv, 3), driverSlice("n2", "nic.example.com", 1))
	s, err := a.rolloutSnapshot(context.Background(), rolloutPlan(), 0, map[string]int64{"n1": 2}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Nodes) != 2 || len(s.Devices) != 2 || s.Claims != nil {
		t.Fatalf("snapshot = %+v", s)
	}
	for _, n := range s.Nodes {
		switch n.Name {
		case "n1":
			if n.Owner != "dra" || n.Expected != 2 || n.PluginDevices != 0 {
				t.Errorf("n1 = %+v", n)
			}
		case "n2":
			if n.Owner != "plugin" || n.Expected != -1 || n.PluginDevices != 4 {
				t.Errorf("n2 = %+v", n)
			}
		}
	}
	if d := s.Devices[0]; !d.Shared || d.Capacity["memory"].Value != 40<<30 || s.Devices[1].Shared {
		t.Errorf("devices = %+v", s.Devices)
	}
}

// allocatedOn is a claim allocated a device of drv in pool, whose allocation names node (or none).
func allocatedOn(name, pool, node string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "t"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Driver: drv, Pool: pool, Device: "gpu-0"}}}}}}
	if node != "" {
		c.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
	}
	return c
}

// TestUndoNeverOwnsANodeTwice: a node whose slices are gone (the drift gate failed) but whose
// claim's allocation names it is held; a claim of the phase's driver whose node cannot be told
// holds every node; a claim allocated on a node while it was routed back puts it back on DRA, held.
func TestUndoNeverOwnsANodeTwice(t *testing.T) {
	ch := rolloutplan.PhaseChange{Phase: "a", Nodes: []rolloutplan.NodeChange{{Node: "n1", Previous: "plugin", HadLabel: true}, {Node: "n2", Previous: "plugin", HadLabel: true}}}
	in := UndoInput{Rollout: "r", OwnerLabel: owner, Change: ch, Drivers: []string{drv}, DRA: "dra"}
	undo := func(t *testing.T, objs ...runtime.Object) (UndoResult, *fake.Clientset) {
		t.Helper()
		objs = append(objs, poolNode("n1", map[string]string{owner: "dra"}, 0), poolNode("n2", map[string]string{owner: "dra"}, 0))
		env, a, kube := activityEnv(t, objs...)
		v, err := env.ExecuteActivity(a.UndoRolloutPhase, in)
		if err != nil {
			t.Fatal(err)
		}
		var res UndoResult
		_ = v.Get(&res)
		return res, kube
	}
	label := func(kube *fake.Clientset, node string) string {
		n, _ := kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		return n.Labels[owner]
	}
	t.Run("slices gone", func(t *testing.T) {
		res, kube := undo(t, allocatedOn("c", "n1", "n1")) // no slice publishes n1 any more
		if len(res.Held) != 1 || res.Held[0].Node != "n1" || len(res.Returned) != 1 || res.Returned[0] != "n2" || label(kube, "n1") != "dra" {
			t.Fatalf("undo = %+v, n1 %q", res, label(kube, "n1"))
		}
	})
	t.Run("node unknown", func(t *testing.T) {
		res, _ := undo(t, allocatedOn("c", "somewhere", ""))
		if len(res.Held) != 2 || len(res.Returned) != 0 {
			t.Fatalf("undo = %+v", res)
		}
	})
	t.Run("allocated while routed back", func(t *testing.T) {
		objs := []runtime.Object{poolNode("n1", map[string]string{owner: "dra"}, 0), poolNode("n2", map[string]string{owner: "dra"}, 0)}
		env, a, kube := activityEnv(t, objs...)
		patches := 0
		kube.PrependReactor("patch", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
			if patches++; patches == 2 && act.(k8stesting.PatchAction).GetName() == "n2" {
				// The scheduler allocates a pending claim on n2 just as it is routed back.
				if err := kube.Tracker().Add(allocatedOn("late", "n2", "n2")); err != nil {
					t.Error(err)
				}
			}
			return false, nil, nil
		})
		v, err := env.ExecuteActivity(a.UndoRolloutPhase, in)
		if err != nil {
			t.Fatal(err)
		}
		var res UndoResult
		_ = v.Get(&res)
		if len(res.Returned) != 1 || res.Returned[0] != "n1" || len(res.Held) != 1 || res.Held[0].Node != "n2" || label(kube, "n2") != "dra" {
			t.Fatalf("undo = %+v, n2 %q", res, label(kube, "n2"))
		}
		// Back on DRA as enable left it: a later enable or undo reads the previous owner from it.
		if n2, _ := kube.CoreV1().Nodes().Get(context.Background(), "n2", metav1.GetOptions{}); n2.Annotations[kubeobj.AnnotationRolloutPrevious] != "r/plugin" {
			t.Errorf("n2 annotations after it was kept on DRA: %v", n2.Annotations)
		}
	})
}
