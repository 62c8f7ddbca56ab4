package capacity

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Features are the allocator features the scheduler of Kubernetes 1.37 has on by default (the
// alpha ones off). The allocator's field set changes between minors: this is pinned to v0.37.2.
var Features = structured.Features{
	AdminAccess:            true,
	ConsumableCapacity:     true,
	DeviceBindingAndStatus: true,
	DeviceTaints:           true,
	PartitionableDevices:   true,
	PrioritizedList:        true,
}

// Cluster is what a what-if reads from the cluster.
type Cluster struct {
	Nodes      []*corev1.Node
	Slices     []*resourcev1.ResourceSlice
	Classes    []*resourcev1.DeviceClass
	Claims     []*resourcev1.ResourceClaim
	TaintRules []*resourcev1.DeviceTaintRule
}

// NodeFit is a what-if's answer for one node: whether all the claims fit there at once, and the
// allocation the scheduler's allocator would make.
type NodeFit struct {
	Node    string                        `json:"node"`
	Fits    bool                          `json:"fits"`
	Results []resourcev1.AllocationResult `json:"results,omitempty"`
}

// Fit asks the scheduler's own allocator (k8s.io/dynamic-resource-allocation/structured) whether
// claims would fit now on each node (or only on node, when set): every current allocation counts,
// shares with their consumed capacity, and DeviceTaintRules are applied to the slices unless
// ignoreTaints. The claims are one Pod's: they must fit on one node together.
func Fit(ctx context.Context, c Cluster, claims []*resourcev1.ResourceClaim, node string, ignoreTaints bool) ([]NodeFit, error) {
	slices := c.Slices
	if !ignoreTaints {
		slices = applyTaintRules(c.Slices, c.TaintRules)
	}
	alloc, err := structured.NewAllocator(ctx, Features, allocatedState(c.Claims), classLister(c.Classes), slices,
		cel.NewCache(100, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		return nil, fmt.Errorf("allocator: %w", err)
	}
	var out []NodeFit
	for _, n := range c.Nodes {
		if node != "" && n.Name != node {
			continue
		}
		res, err := alloc.Allocate(ctx, n, claims)
		if err != nil {
			return nil, fmt.Errorf("allocate on %s: %w", n.Name, err)
		}
		out = append(out, NodeFit{Node: n.Name, Fits: res != nil, Results: res})
	}
	if node != "" && len(out) == 0 {
		return nil, fmt.Errorf("node %s not found", node)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Node < out[b].Node })
	return out, nil
}

// allocatedState is what the scheduler counts as taken: whole devices, shares by ShareID, and
// the capacity shares consume. Admin access takes nothing.
func allocatedState(claims []*resourcev1.ResourceClaim) structured.AllocatedState {
	st := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID == nil {
				st.AllocatedDevices.Insert(id)
				continue
			}
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
		}
	}
	return st
}

// applyTaintRules returns copies of the slices with each DeviceTaintRule's taint on the devices it
// selects (by driver, pool and device name), as the scheduler sees them.
func applyTaintRules(slices []*resourcev1.ResourceSlice, rules []*resourcev1.DeviceTaintRule) []*resourcev1.ResourceSlice {
	if len(rules) == 0 {
		return slices
	}
	out := make([]*resourcev1.ResourceSlice, 0, len(slices))
	for _, s := range slices {
		var cp *resourcev1.ResourceSlice
		for i, d := range s.Spec.Devices {
			for _, r := range rules {
				sel := r.Spec.DeviceSelector
				if sel == nil || !matches(sel.Driver, s.Spec.Driver) || !matches(sel.Pool, s.Spec.Pool.Name) || !matches(sel.Device, d.Name) {
					continue
				}
				if cp == nil {
					cp = s.DeepCopy()
				}
				cp.Spec.Devices[i].Taints = append(cp.Spec.Devices[i].Taints, r.Spec.Taint)
			}
		}
		if cp == nil {
			cp = s
		}
		out = append(out, cp)
	}
	return out
}

func matches(want *string, have string) bool { return want == nil || *want == have }

// classLister serves DeviceClasses from a list (the allocator's DeviceClassLister).
type classLister []*resourcev1.DeviceClass

func (l classLister) List() ([]*resourcev1.DeviceClass, error) { return l, nil }

func (l classLister) Get(name string) (*resourcev1.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("deviceclasses"), name)
}
