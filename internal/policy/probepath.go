package policy

import (
	"fmt"
	"maps"
	"slices"
)

// A review's probe may differ by what the device went through before it: a reset deserves a short
// diagnostic, a reboot a longer one, a quarantine that no step touched the plain probe. The policy
// file's probeAfter names a check per repair step kind; a review after a step of that kind runs
// it instead of the probe.
//
//	probe: {image: busybox:1.37, command: [sh, -c, "exit 0"]}   # after no step
//	probeAfter:
//	  reset: {image: nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04, command: [dcgmi, diag, -r, "2"]}
//	  node:  {image: nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04, command: [dcgmi, diag, -r, "3"], timeout: 45m}

// ProbeFor is the probe of a review that follows a step of kind after ("": no step, or a kind
// the policy names no probe for).
func (p Policy) ProbeFor(after RepairKind) Check {
	if c, ok := p.ProbeAfter[after]; ok && after != "" {
		return c
	}
	return p.Probe
}

// probeAfterEntry is the policy file's probeAfter: a check per step kind.
type probeAfterEntry map[string]*checkEntry

// apply sets dst's probes by path. Each starts from the policy's probe for its namespace, timeout
// and device class, but must name its own image and command: a diagnostic that borrowed the
// default probe's `exit 0` would prove nothing the path asked for.
func (e probeAfterEntry) apply(probe Check, dst *map[RepairKind]Check) error {
	if e == nil {
		return nil
	}
	out := map[RepairKind]Check{}
	for _, key := range slices.Sorted(maps.Keys(e)) {
		kind := RepairKind(key)
		if !slices.Contains(RepairKinds, kind) {
			return fmt.Errorf("probeAfter.%s: not a repair step kind (known: %s, %s)", key, RepairReset, RepairNode)
		}
		c := e[key]
		if c == nil || c.Image == nil || *c.Image == "" || len(c.Command) == 0 {
			return fmt.Errorf("probeAfter.%s: a probe by path needs its own image and command", key)
		}
		check := Check{Timeout: probe.Timeout, Namespace: probe.Namespace, DeviceClass: probe.DeviceClass}
		c.apply(&check)
		out[kind] = check // Validate checks its timeout with the rest
	}
	*dst = out
	return nil
}
