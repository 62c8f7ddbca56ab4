package capacity

import (
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const drv = "gpu.example.com"

var q = resource.MustParse

// sharedSlice is one node's slice: shared GPUs with 40Gi of memory taken from 4Gi in 4Gi steps,
// each with a uuid and a "card" attribute (two GPUs per card).
func sharedSlice(node string, n int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: resourcev1.ResourceSliceSpec{Driver: drv, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
	for i := 0; i < n; i++ {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name:                     "gpu-" + string(rune('0'+i)),
			AllowMultipleAllocations: ptr.To(true),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"uuid":                {StringValue: ptr.To(node + "-uuid-" + string(rune('0'+i)))},
				"example.com/card-id": {IntValue: ptr.To(int64(i / 2))},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: q("40Gi"),
				RequestPolicy: &resourcev1.CapacityRequestPolicy{ValidRange: &resourcev1.CapacityRequestPolicyRange{
					Min: ptr.To(q("4Gi")), Step: ptr.To(q("4Gi")), Max: ptr.To(q("40Gi"))}}}},
		})
	}
	return s
}

type share struct {
	req, dev, share, mem string
}

func claim(ns, name, class string, shares ...share) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}}}},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{}}}
	for _, s := range shares {
		r := resourcev1.DeviceRequestAllocationResult{Request: s.req, Driver: drv, Pool: "n1", Device: s.dev}
		if s.share != "" {
			r.ShareID = ptr.To(types.UID(s.share))
		}
		if s.mem != "" {
			r.ConsumedCapacity = map[resourcev1.QualifiedName]resource.Quantity{"memory": q(s.mem)}
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

func TestCheckInvariants(t *testing.T) {
	slices := []*resourcev1.ResourceSlice{sharedSlice("n1", 4)}
	distinct := func(attr string, devs ...string) *resourcev1.ResourceClaim {
		var ss []share
		for i, d := range devs {
			ss = append(ss, share{req: "gpu", dev: d, share: "d" + string(rune('0'+i)), mem: "4Gi"})
		}
		c := claim("team-a", "pair", "gpu", ss...)
		c.Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{Requests: []string{"gpu"}, DistinctAttribute: ptr.To(resourcev1.FullyQualifiedName(attr))}}
		return c
	}
	cases := []struct {
		name    string
		claims  []*resourcev1.ResourceClaim
		granted map[string]map[string]resourcev1.CapacityRequestPolicy
		tenants map[string][]string
		want    []string // Violation.String() substrings, in order
	}{
		{name: "clean: three shares within one device, policy kept", claims: []*resourcev1.ResourceClaim{
			claim("team-a", "a", "gpu", share{"gpu", "gpu-0", "s1", "16Gi"}),
			claim("team-b", "b", "gpu", share{"gpu", "gpu-0", "s2", "16Gi"}),
			claim("team-b", "c", "gpu", share{"gpu", "gpu-0", "s3", "8Gi"})}},
		{name: "oversold", claims: []*resourcev1.ResourceClaim{
			claim("team-a", "a", "gpu", share{"gpu", "gpu-1", "s1", "24Gi"}),
			claim("team-b", "b", "gpu", share{"gpu", "gpu-1", "s2", "20Gi"})},
			want: []string{"oversold: claim team-a/a share - on gpu.example.com/n1/gpu-1: memory: shares take 44Gi of 40Gi (claims team-a/a, team-b/b)"}},
		{name: "policy breach: off the step, under the minimum", claims: []*resourcev1.ResourceClaim{
			claim("team-a", "a", "gpu", share{"gpu", "gpu-0", "s1", "6Gi"}),
			claim("team-a", "b", "gpu", share{"gpu", "gpu-1", "s2", "2Gi"})},
			want: []string{"policy-breach: claim team-a/a share s1 on gpu.example.com/n1/gpu-0: memory: 6Gi is not the minimum 4Gi plus a multiple of the step 4Gi",
				"policy-breach: claim team-a/b share s2 on gpu.example.com/n1/gpu-1: memory: 2Gi is under the minimum 4Gi"}},
		{name: "a later policy does not apply retroactively", claims: []*resourcev1.ResourceClaim{
			claim("team-a", "old", "gpu", share{"gpu", "gpu-0", "s1", "6Gi"})},
			granted: map[string]map[string]resourcev1.CapacityRequestPolicy{
				"team-a-old/gpu/gpu.example.com/n1/gpu-0/s1": {"memory": {ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: ptr.To(q("2Gi")), Step: ptr.To(q("2Gi"))}}}}},
		{name: "valid values", claims: []*resourcev1.ResourceClaim{
			claim("team-a", "v", "gpu", share{"gpu", "gpu-0", "s1", "12Gi"})},
			granted: map[string]map[string]resourcev1.CapacityRequestPolicy{
				"team-a-v/gpu/gpu.example.com/n1/gpu-0/s1": {"memory": {ValidValues: []resource.Quantity{q("8Gi"), q("16Gi")}}}},
			want: []string{"policy-breach: claim team-a/v share s1 on gpu.example.com/n1/gpu-0: memory: 12Gi is none of the valid values"}},
		{name: "over the maximum", claims: []*resourcev1.ResourceClaim{
			claim("team-a", "big", "gpu", share{"gpu", "gpu-2", "s1", "44Gi"})},
			want: []string{"oversold", "policy-breach: claim team-a/big share s1 on gpu.example.com/n1/gpu-2: memory: 44Gi is over the maximum 40Gi"}},
		{name: "duplicate ShareID on one device", claims: []*resourcev1.ResourceClaim{
			claim("team-a", "a", "gpu", share{"gpu", "gpu-0", "same", "4Gi"}),
			claim("team-b", "b", "gpu", share{"gpu", "gpu-0", "same", "4Gi"}),
			claim("team-b", "c", "gpu", share{"gpu", "gpu-1", "same", "4Gi"})},
			want: []string{"duplicate-share-id: claim team-b/b share same on gpu.example.com/n1/gpu-0: ShareID also held by team-a/a"}},
		{name: "DistinctAttribute held", claims: []*resourcev1.ResourceClaim{distinct("example.com/card-id", "gpu-0", "gpu-2")}},
		{name: "DistinctAttribute broken", claims: []*resourcev1.ResourceClaim{distinct("example.com/card-id", "gpu-0", "gpu-1")},
			want: []string{"distinct-attribute: claim team-a/pair share d1 on gpu.example.com/n1/gpu-1: example.com/card-id is 0 on gpu.example.com/n1/gpu-0 too"}},
		{name: "DistinctAttribute in the driver's own domain", claims: []*resourcev1.ResourceClaim{distinct(drv+"/uuid", "gpu-3", "gpu-3")}},
		{name: "forbidden namespace", tenants: map[string][]string{"team-a": {"gpu"}},
			claims: []*resourcev1.ResourceClaim{claim("team-a", "ok", "gpu"), claim("team-a", "bad", "gpu-premium"), claim("team-free", "any", "gpu-premium")},
			want:   []string{"forbidden-namespace: claim team-a/bad share - on gpu-premium: request gpu asks for class gpu-premium; namespace team-a may use [gpu]"}},
		{name: "admin access consumes nothing", claims: func() []*resourcev1.ResourceClaim {
			c := claim("ops", "look", "gpu", share{"gpu", "gpu-0", "s1", "40Gi"})
			c.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
			return []*resourcev1.ResourceClaim{c, claim("team-a", "a", "gpu", share{"gpu", "gpu-0", "s2", "40Gi"})}
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(Input{Slices: slices, Claims: tc.claims, Granted: tc.granted, Tenants: tc.tenants})
			if len(got) != len(tc.want) {
				t.Fatalf("violations:\n%v\nwant %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i].String(), w) {
					t.Errorf("violation %d = %q\nwant it to contain %q", i, got[i].String(), w)
				}
			}
		})
	}
}

func TestCountsNamesEveryInvariant(t *testing.T) {
	n := Counts([]Violation{{Invariant: Oversold}, {Invariant: Oversold}, {Invariant: PolicyBreach}})
	if len(n) != len(Invariants) || n[Oversold] != 2 || n[PolicyBreach] != 1 || n[ForbiddenTenant] != 0 {
		t.Errorf("counts = %v", n)
	}
}
