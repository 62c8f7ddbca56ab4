package capacity

import (
	"encoding/json"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
)

// A claim's grant record keeps, per share (ShareKey), the request policy of each capacity it
// consumes as it was when DeviceWarden first saw the allocation: a policy changed later applies
// to new claims, never to this one. It is a ConfigMap in DeviceWarden's own namespace
// (GrantConfigMap), where the claim's tenant cannot write: on the claim itself (an annotation, as
// before) a tenant could write an empty policy and hide a breach. Such an annotation is ignored.
const (
	// GrantLabel marks a grant record; its value is the claim's UID.
	GrantLabel = "devicewarden.io/capacity-grant"
	// GrantKey is the record's data key.
	GrantKey = "policies"
)

// GrantConfigMap is the name of the grant record of the claim with this UID.
func GrantConfigMap(uid string) string { return "devicewarden-grant-" + uid }

// ParseGrant reads a grant record's policies ("": no record, nil).
func ParseGrant(raw string) (map[string]map[string]resourcev1.CapacityRequestPolicy, error) {
	if raw == "" {
		return nil, nil
	}
	var out map[string]map[string]resourcev1.CapacityRequestPolicy
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// AddClaim adds a claim to the check with its grant record's text (raw, "" when it has none); it
// reports whether it had a record. A record that does not decode is an error: it must not pass
// as no record.
func (in *Input) AddClaim(c *resourcev1.ResourceClaim, raw string) (bool, error) {
	g, err := ParseGrant(raw)
	if err != nil {
		return false, fmt.Errorf("claim %s/%s: grant record %s: %w", c.Namespace, c.Name, GrantConfigMap(string(c.UID)), err)
	}
	in.Claims = append(in.Claims, c)
	if in.Granted == nil && len(g) > 0 {
		in.Granted = map[string]map[string]resourcev1.CapacityRequestPolicy{}
	}
	for k, v := range g {
		in.Granted[k] = v
	}
	return g != nil, nil
}

// Snapshot is the grant record's text recording the current request policies of the shared devices
// an allocated claim consumes ("" when it consumes none).
func Snapshot(c *resourcev1.ResourceClaim, slices []*resourcev1.ResourceSlice) string {
	if c.Status.Allocation == nil {
		return ""
	}
	devices := map[string]*resourcev1.Device{}
	for _, s := range slices {
		for i := range s.Spec.Devices {
			devices[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+s.Spec.Devices[i].Name] = &s.Spec.Devices[i]
		}
	}
	out := map[string]map[string]resourcev1.CapacityRequestPolicy{}
	for _, r := range c.Status.Allocation.Devices.Results {
		d := devices[r.Driver+"/"+r.Pool+"/"+r.Device]
		if d == nil || len(r.ConsumedCapacity) == 0 {
			continue
		}
		pols := map[string]resourcev1.CapacityRequestPolicy{}
		for name := range r.ConsumedCapacity {
			if cp, ok := d.Capacity[name]; ok && cp.RequestPolicy != nil {
				pols[string(name)] = *cp.RequestPolicy
			}
		}
		if len(pols) > 0 {
			out[ShareKey(string(c.UID), r)] = pols
		}
	}
	if len(out) == 0 {
		return ""
	}
	b, _ := json.Marshal(out)
	return string(b)
}
