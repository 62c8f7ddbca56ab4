// Package capacity checks shared-device (consumable capacity) allocations against the invariants
// a platform team must be able to prove: no device oversold, every share within the request
// policy it was granted under, ShareIDs unique per device, DistinctAttribute constraints held,
// and no claim of a class its tenant may not use. It reads API objects and does no I/O.
package capacity

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Invariant names, also the metric label values.
const (
	Oversold          = "oversold"
	PolicyBreach      = "policy-breach"
	DuplicateShareID  = "duplicate-share-id"
	DistinctAttribute = "distinct-attribute"
	ForbiddenTenant   = "forbidden-namespace"
)

// Invariants lists them in report order.
var Invariants = []string{Oversold, PolicyBreach, DuplicateShareID, DistinctAttribute, ForbiddenTenant}

// Violation is one broken invariant, with the claim, namespace, share and device it concerns.
type Violation struct {
	Invariant string `json:"invariant"`
	Namespace string `json:"namespace,omitempty"`
	Claim     string `json:"claim,omitempty"`
	ShareID   string `json:"shareID,omitempty"`
	Device    string `json:"device"`
	Detail    string `json:"detail"`
}

func (v Violation) String() string {
	share := v.ShareID
	if share == "" {
		share = "-"
	}
	return fmt.Sprintf("%s: claim %s/%s share %s on %s: %s", v.Invariant, v.Namespace, v.Claim, share, v.Device, v.Detail)
}

// Input is what the checker reads.
type Input struct {
	Slices []*resourcev1.ResourceSlice
	Claims []*resourcev1.ResourceClaim
	// Granted holds, per share, the request policy in force when it was granted (see ShareKey);
	// a share without one is checked against the device's current policy.
	Granted map[string]map[string]resourcev1.CapacityRequestPolicy
	// Tenants restricts the classes some namespaces may claim; a namespace not listed is free.
	Tenants map[string][]string
}

// ShareKey names one allocated share: claim UID, request and device (and ShareID when set).
func ShareKey(claimUID string, r resourcev1.DeviceRequestAllocationResult) string {
	k := claimUID + "/" + r.Request + "/" + r.Driver + "/" + r.Pool + "/" + r.Device
	if r.ShareID != nil {
		k += "/" + string(*r.ShareID)
	}
	return k
}

type deviceRef struct {
	driver string
	dev    *resourcev1.Device
}

// Check lists every violation, ordered by invariant, then device, then claim.
func Check(in Input) []Violation {
	devices := map[string]deviceRef{}
	for _, s := range in.Slices {
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			devices[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+d.Name] = deviceRef{driver: s.Spec.Driver, dev: d}
		}
	}
	var out []Violation
	used := map[string]map[string]*resource.Quantity{} // device -> capacity -> sum
	users := map[string][]*resourcev1.ResourceClaim{}
	shares := map[string]string{} // device/shareID -> first claim
	for _, c := range in.Claims {
		out = append(out, tenantViolations(c, in.Tenants)...)
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue // admin access observes a device without consuming it
			}
			key := r.Driver + "/" + r.Pool + "/" + r.Device
			ref, known := devices[key]
			if r.ShareID != nil {
				sk := key + "/" + string(*r.ShareID)
				if first, dup := shares[sk]; dup {
					out = append(out, violation(DuplicateShareID, c, r, fmt.Sprintf("ShareID also held by %s", first)))
				} else {
					shares[sk] = c.Namespace + "/" + c.Name
				}
			}
			if !known || ref.dev.AllowMultipleAllocations == nil || !*ref.dev.AllowMultipleAllocations {
				continue
			}
			users[key] = append(users[key], c)
			for name, q := range r.ConsumedCapacity {
				if used[key] == nil {
					used[key] = map[string]*resource.Quantity{}
				}
				sum := used[key][string(name)]
				if sum == nil {
					sum = resource.NewQuantity(0, q.Format)
					used[key][string(name)] = sum
				}
				sum.Add(q)
				granted := in.Granted[ShareKey(string(c.UID), r)]
				if v := policyBreach(ref.dev, string(name), q, granted); v != "" {
					out = append(out, violation(PolicyBreach, c, r, v))
				}
			}
		}
		out = append(out, distinctViolations(c, devices)...)
	}
	out = append(out, oversold(devices, used, users)...)
	sort.SliceStable(out, func(a, b int) bool {
		ia, ib := slices.Index(Invariants, out[a].Invariant), slices.Index(Invariants, out[b].Invariant)
		if ia != ib {
			return ia < ib
		}
		if out[a].Device != out[b].Device {
			return out[a].Device < out[b].Device
		}
		return out[a].Namespace+"/"+out[a].Claim < out[b].Namespace+"/"+out[b].Claim
	})
	return out
}

func violation(inv string, c *resourcev1.ResourceClaim, r resourcev1.DeviceRequestAllocationResult, detail string) Violation {
	v := Violation{Invariant: inv, Namespace: c.Namespace, Claim: c.Name, Device: r.Driver + "/" + r.Pool + "/" + r.Device, Detail: detail}
	if r.ShareID != nil {
		v.ShareID = string(*r.ShareID)
	}
	return v
}

// oversold reports each shared device capacity whose shares add up to more than it has.
func oversold(devices map[string]deviceRef, used map[string]map[string]*resource.Quantity, users map[string][]*resourcev1.ResourceClaim) []Violation {
	var out []Violation
	for key, caps := range used {
		d := devices[key].dev
		for name, sum := range caps {
			have, ok := d.Capacity[resourcev1.QualifiedName(name)]
			if !ok || sum.Cmp(have.Value) <= 0 {
				continue
			}
			var names []string
			for _, c := range users[key] {
				names = append(names, c.Namespace+"/"+c.Name)
			}
			slices.Sort(names)
			ns, claim, _ := strings.Cut(names[0], "/")
			out = append(out, Violation{Invariant: Oversold, Namespace: ns, Claim: claim, Device: key,
				Detail: fmt.Sprintf("%s: shares take %s of %s (claims %s)", name, sum.String(), have.Value.String(), strings.Join(names, ", "))})
		}
	}
	return out
}

// policyBreach says how a share breaks the request policy it was granted under ("" if it does not).
func policyBreach(d *resourcev1.Device, name string, q resource.Quantity, granted map[string]resourcev1.CapacityRequestPolicy) string {
	var pol *resourcev1.CapacityRequestPolicy
	if g, ok := granted[name]; ok {
		pol = &g
	} else if c, ok := d.Capacity[resourcev1.QualifiedName(name)]; ok {
		pol = c.RequestPolicy
	}
	if pol == nil {
		return ""
	}
	// A request that names no amount consumes the policy's default, which the allocator grants
	// whatever the values or range say.
	if pol.Default != nil && pol.Default.Cmp(q) == 0 {
		return ""
	}
	if len(pol.ValidValues) > 0 {
		for _, v := range pol.ValidValues {
			if v.Cmp(q) == 0 {
				return ""
			}
		}
		return fmt.Sprintf("%s: %s is none of the valid values", name, q.String())
	}
	r := pol.ValidRange
	if r == nil {
		return ""
	}
	if r.Min != nil && q.Cmp(*r.Min) < 0 {
		return fmt.Sprintf("%s: %s is under the minimum %s", name, q.String(), r.Min.String())
	}
	if r.Max != nil && q.Cmp(*r.Max) > 0 {
		return fmt.Sprintf("%s: %s is over the maximum %s", name, q.String(), r.Max.String())
	}
	if r.Step != nil && r.Min != nil && !onGrid(q, r, Features.FractionalCapacityRange) {
		return fmt.Sprintf("%s: %s is not the minimum %s plus a multiple of the step %s", name, q.String(), r.Min.String(), r.Step.String())
	}
	return ""
}

// onGrid says whether q is a value the scheduler's allocator can grant under the range: the
// minimum plus a whole number of steps, counted as the allocator counts them. With fractional
// ranges on (DRAFractionalCapacityRange) and min, max and step all milli-values with a step of at
// least 1m, it counts in milli-units (a 1500m step is 1.5); otherwise in whole units of the
// rounded-up Value() (a 1500m step is 2), and a fractional q is never granted.
func onGrid(q resource.Quantity, r *resourcev1.CapacityRequestPolicyRange, fractional bool) bool {
	if fractional && fitsMilli(*r.Min) && fitsMilli(*r.Step) && (r.Max == nil || fitsMilli(*r.Max)) && r.Step.MilliValue() >= 1 {
		if !fitsMilli(q) || q.Cmp(*resource.NewMilliQuantity(q.MilliValue(), q.Format)) != 0 {
			return false // past the milli range, or finer than a milli-unit
		}
		return (q.MilliValue()-r.Min.MilliValue())%r.Step.MilliValue() == 0
	}
	step := r.Step.Value()
	if step <= 0 {
		return true
	}
	if q.CmpInt64(math.MaxInt64) > 0 || q.Cmp(*resource.NewQuantity(q.Value(), q.Format)) != 0 {
		return false // past int64, or not a whole number
	}
	return (q.Value()-r.Min.Value())%step == 0
}

// fitsMilli says whether q's milli-value is an int64.
func fitsMilli(q resource.Quantity) bool {
	return q.CmpInt64(math.MaxInt64/1000) <= 0 && q.CmpInt64(math.MinInt64/1000) >= 0
}

// distinctViolations checks a claim's DistinctAttribute constraints: the devices allocated for
// the constrained requests must all differ in that attribute.
func distinctViolations(c *resourcev1.ResourceClaim, devices map[string]deviceRef) []Violation {
	var out []Violation
	for _, con := range c.Spec.Devices.Constraints {
		if con.DistinctAttribute == nil {
			continue
		}
		attr := string(*con.DistinctAttribute)
		seen := map[string]string{}
		for _, r := range c.Status.Allocation.Devices.Results {
			req, _, _ := strings.Cut(r.Request, "/")
			if len(con.Requests) > 0 && !slices.Contains(con.Requests, req) {
				continue
			}
			key := r.Driver + "/" + r.Pool + "/" + r.Device
			ref, ok := devices[key]
			if !ok {
				continue
			}
			val, ok := attribute(ref, attr)
			if !ok {
				continue
			}
			if other, dup := seen[val]; dup && other != key {
				out = append(out, violation(DistinctAttribute, c, r, fmt.Sprintf("%s is %s on %s too", attr, val, other)))
				continue
			}
			seen[val] = key
		}
	}
	return out
}

// attribute reads a fully qualified attribute (domain/name) of a device; a device's attributes
// in its driver's own domain may be written without it.
func attribute(ref deviceRef, fqn string) (string, bool) {
	a, ok := ref.dev.Attributes[resourcev1.QualifiedName(fqn)]
	if !ok {
		domain, name, found := strings.Cut(fqn, "/")
		if !found || domain != ref.driver {
			return "", false
		}
		if a, ok = ref.dev.Attributes[resourcev1.QualifiedName(name)]; !ok {
			return "", false
		}
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue, true
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue), true
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue), true
	case a.VersionValue != nil:
		return *a.VersionValue, true
	}
	return "", false
}

// tenantViolations reports the classes a claim asks for that its namespace may not use.
func tenantViolations(c *resourcev1.ResourceClaim, tenants map[string][]string) []Violation {
	allowed, restricted := tenants[c.Namespace]
	if !restricted {
		return nil
	}
	var out []Violation
	for _, r := range c.Spec.Devices.Requests {
		classes := []string{}
		if r.Exactly != nil {
			classes = append(classes, r.Exactly.DeviceClassName)
		}
		for _, s := range r.FirstAvailable {
			classes = append(classes, s.DeviceClassName)
		}
		for _, class := range classes {
			if !slices.Contains(allowed, class) {
				out = append(out, Violation{Invariant: ForbiddenTenant, Namespace: c.Namespace, Claim: c.Name, Device: class,
					Detail: fmt.Sprintf("request %s asks for class %s; namespace %s may use %v", r.Name, class, c.Namespace, allowed)})
			}
		}
	}
	return out
}

// Counts counts violations by invariant (every invariant present, zero or not).
func Counts(vs []Violation) map[string]int {
	out := map[string]int{}
	for _, inv := range Invariants {
		out[inv] = 0
	}
	for _, v := range vs {
		out[v.Invariant]++
	}
	return out
}
