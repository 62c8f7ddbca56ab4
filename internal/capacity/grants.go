package capacity

import (
	"encoding/json"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
)

// AnnotationGranted on a claim keeps, per share (ShareKey), the request policy of each capacity
// it consumes as it was when DeviceWarden first saw the allocation: a policy changed later
// applies to new claims, never to this one.
const AnnotationGranted = "devicewarden.io/granted-capacity-policy"

// Granted reads the snapshots a claim carries (nil when it has none or it does not decode).
func Granted(c *resourcev1.ResourceClaim) (map[string]map[string]resourcev1.CapacityRequestPolicy, error) {
	raw, ok := c.Annotations[AnnotationGranted]
	if !ok {
		return nil, nil
	}
	var out map[string]map[string]resourcev1.CapacityRequestPolicy
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("claim %s/%s: annotation %s: %w", c.Namespace, c.Name, AnnotationGranted, err)
	}
	return out, nil
}

// AddClaim adds a claim to the check with the grant-time policies it records; it reports whether
// it had a record. A record that does not decode is an error: it must not pass as no record.
func (in *Input) AddClaim(c *resourcev1.ResourceClaim) (bool, error) {
	g, err := Granted(c)
	if err != nil {
		return false, err
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

// Snapshot is the annotation value recording the current request policies of the shared devices
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
