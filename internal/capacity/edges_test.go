package capacity

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestViolationsAreOrdered(t *testing.T) {
	sl := sharedSlice("n1", 2)
	// Added out of order: two devices oversold, and breaches on one device by two claims.
	got := Check(Input{Slices: []*resourcev1.ResourceSlice{sl}, Claims: []*resourcev1.ResourceClaim{
		claim("t", "y", "gpu", share{"gpu", "gpu-0", "b", "42Gi"}),
		claim("t", "z", "gpu", share{"gpu", "gpu-1", "a", "44Gi"}),
		claim("t", "b", "gpu", share{"gpu", "gpu-0", "c", "6Gi"}),
	}})
	var order []string
	for _, v := range got {
		order = append(order, v.Invariant+":"+v.Device[len(v.Device)-5:]+":"+v.Claim)
	}
	want := "oversold:gpu-0:b oversold:gpu-1:z policy-breach:gpu-0:b policy-breach:gpu-0:y policy-breach:gpu-1:z"
	if strings.Join(order, " ") != want {
		t.Errorf("order:\n got %v\nwant %s", order, want)
	}
}

func TestPolicyEdges(t *testing.T) {
	dev := &resourcev1.Device{Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: q("40Gi")}}}
	pol := func(min, step string) map[string]resourcev1.CapacityRequestPolicy {
		r := &resourcev1.CapacityRequestPolicyRange{Min: ptr.To(q(min))}
		if step != "" {
			r.Step = ptr.To(q(step))
		}
		return map[string]resourcev1.CapacityRequestPolicy{"memory": {ValidRange: r}}
	}
	// Steps count from the minimum: 1Gi, 5Gi, 9Gi ... are valid, 4Gi is not.
	if v := policyBreach(dev, "memory", q("5Gi"), pol("1Gi", "4Gi")); v != "" {
		t.Errorf("5Gi with min 1Gi step 4Gi: %s", v)
	}
	if v := policyBreach(dev, "memory", q("4Gi"), pol("1Gi", "4Gi")); v == "" {
		t.Errorf("4Gi with min 1Gi step 4Gi passed")
	}
	// A zero step means any amount over the minimum.
	if v := policyBreach(dev, "memory", q("3Gi"), pol("1Gi", "0")); v != "" {
		t.Errorf("zero step: %s", v)
	}
	if v := policyBreach(dev, "memory", q("3Gi"), nil); v != "" {
		t.Errorf("no policy: %s", v)
	}
}

func TestDistinctAttributeScope(t *testing.T) {
	sl := sharedSlice("n1", 4)
	c := claim("t", "two", "gpu", share{"a", "gpu-0", "s1", "4Gi"}, share{"b", "gpu-1", "s2", "4Gi"})
	c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourcev1.DeviceRequest{Name: "b"})
	// Only request a is constrained: b's device sharing its card does not count.
	c.Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{Requests: []string{"a"}, DistinctAttribute: ptr.To(resourcev1.FullyQualifiedName("example.com/card-id"))}}
	if v := Check(Input{Slices: []*resourcev1.ResourceSlice{sl}, Claims: []*resourcev1.ResourceClaim{c}}); len(v) != 0 {
		t.Errorf("a constraint on request a judged request b: %v", v)
	}
	// An attribute of another domain is not the driver's short one.
	c.Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{DistinctAttribute: ptr.To(resourcev1.FullyQualifiedName("other.example.com/uuid"))}}
	c.Status.Allocation.Devices.Results[1].Device = "gpu-0"
	if v := Check(Input{Slices: []*resourcev1.ResourceSlice{sl}, Claims: []*resourcev1.ResourceClaim{c}}); len(v) != 0 {
		t.Errorf("other.example.com/uuid read as the driver's uuid: %v", v)
	}
}

func TestTaintRuleForAWholeDriver(t *testing.T) {
	c := Cluster{Nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}, Slices: []*resourcev1.ResourceSlice{sharedSlice("n1", 2)},
		Classes: []*resourcev1.DeviceClass{gpuClass()},
		TaintRules: []*resourcev1.DeviceTaintRule{{ObjectMeta: metav1.ObjectMeta{Name: "all"}, Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(drv)},
			Taint:          resourcev1.DeviceTaint{Key: "example.com/upgrade", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}}}
	if got, err := Fit(context.Background(), c, []*resourcev1.ResourceClaim{want("a", "4Gi")}, "", false); err != nil || got[0].Fits {
		t.Errorf("fits while every device of the driver is tainted: %+v %v", got, err)
	}
}

func TestStartedCountsAFinishedContainer(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID("p")}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}}}
	if !started(pod) {
		t.Error("a Pod whose container ran and ended has started")
	}
}

// TestDistinctAttributeOfAllRequestsInTheDriversDomain: a constraint naming no request covers them
// all, and the driver's own attributes may be written without its domain in the slice.
func TestDistinctAttributeOfAllRequestsInTheDriversDomain(t *testing.T) {
	sl := sharedSlice("n1", 2)
	for i := range sl.Spec.Devices {
		sl.Spec.Devices[i].Attributes["card"] = resourcev1.DeviceAttribute{StringValue: ptr.To("card-0")}
	}
	c := claim("t", "two", "gpu", share{"a", "gpu-0", "s1", "4Gi"}, share{"b", "gpu-1", "s2", "4Gi"})
	c.Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{DistinctAttribute: ptr.To(resourcev1.FullyQualifiedName(drv + "/card"))}}
	v := Check(Input{Slices: []*resourcev1.ResourceSlice{sl}, Claims: []*resourcev1.ResourceClaim{c}})
	if len(v) != 1 || v[0].Invariant != DistinctAttribute || !strings.Contains(v[0].Detail, "is card-0 on") {
		t.Errorf("violations = %v", v)
	}
}

func TestAttributeKinds(t *testing.T) {
	ref := deviceRef{driver: drv, dev: &resourcev1.Device{Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"b": {BoolValue: ptr.To(true)}, "v": {VersionValue: ptr.To("1.2.3")}, "i": {IntValue: ptr.To(int64(7))}, "s": {StringValue: ptr.To("x")}, "none": {}}}}
	for name, want := range map[string]string{"b": "true", "v": "1.2.3", "i": "7", "s": "x"} {
		if got, ok := attribute(ref, drv+"/"+name); !ok || got != want {
			t.Errorf("%s = %q %t, want %q", name, got, ok, want)
		}
	}
	if _, ok := attribute(ref, drv+"/none"); ok {
		t.Error("an attribute without a value has one")
	}
	if _, ok := attribute(ref, "nodomain"); ok {
		t.Error("a name without a domain matched")
	}
}

func TestFitAnswersInNodeOrder(t *testing.T) {
	c := Cluster{Classes: []*resourcev1.DeviceClass{gpuClass()}}
	for _, n := range []string{"n3", "n1", "n2"} {
		c.Nodes = append(c.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		c.Slices = append(c.Slices, sharedSlice(n, 1))
	}
	got, err := Fit(context.Background(), c, []*resourcev1.ResourceClaim{want("a", "4Gi")}, "", false)
	if err != nil || len(got) != 3 || got[0].Node != "n1" || got[1].Node != "n2" || got[2].Node != "n3" {
		t.Errorf("answers = %+v %v", got, err)
	}
}

func TestGrantedAndSnapshot(t *testing.T) {
	sl := sharedSlice("n1", 1)
	c := claim("t", "a", "gpu", share{"gpu", "gpu-0", "s1", "8Gi"})
	snap := Snapshot(c, []*resourcev1.ResourceSlice{sl})
	if !strings.Contains(snap, `"t-a/gpu/`+drv+`/n1/gpu-0/s1"`) || !strings.Contains(snap, `"min":"4Gi"`) {
		t.Fatalf("snapshot = %s", snap)
	}
	g, err := ParseGrant(snap)
	if err != nil || g["t-a/gpu/"+drv+"/n1/gpu-0/s1"]["memory"].ValidRange.Min.String() != "4Gi" {
		t.Fatalf("granted = %+v %v", g, err)
	}
	if _, err := ParseGrant("{"); err == nil {
		t.Error("a garbled record decoded")
	}
	if g, err := ParseGrant(""); g != nil || err != nil {
		t.Errorf("no record: %v %v", g, err)
	}
	var in Input
	if had, err := in.AddClaim(c, "{"); had || err == nil || !strings.Contains(err.Error(), GrantConfigMap("t-a")) {
		t.Errorf("a garbled record added: %v %v", had, err)
	}
	whole := claim("t", "w", "gpu", share{req: "gpu", dev: "gpu-0"})
	if s := Snapshot(whole, []*resourcev1.ResourceSlice{sl}); s != "" {
		t.Errorf("a whole-device claim has a snapshot: %s", s)
	}
	whole.Status.Allocation = nil
	if s := Snapshot(whole, []*resourcev1.ResourceSlice{sl}); s != "" {
		t.Errorf("an unallocated claim has a snapshot: %s", s)
	}
}

func TestSnapshotSkipsCapacitiesWithoutAPolicy(t *testing.T) {
	sl := sharedSlice("n1", 1)
	mem := sl.Spec.Devices[0].Capacity["memory"]
	mem.RequestPolicy = nil
	sl.Spec.Devices[0].Capacity["memory"] = mem
	if s := Snapshot(claim("t", "a", "gpu", share{"gpu", "gpu-0", "s1", "8Gi"}), []*resourcev1.ResourceSlice{sl}); s != "" {
		t.Errorf("snapshot of a share under no policy = %s", s)
	}
}
