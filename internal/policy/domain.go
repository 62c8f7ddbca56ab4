package policy

import (
	"fmt"
	"strings"
)

// A reset domain is what a reset of one device reaches: on many systems more than the device. A
// GPU reset inside an AMD XGMI hive can disrupt its peers; an NVSwitch baseboard's GPU reset goes
// through the fabric and retrains its links; an Ascend NPU is reset only once its HCCS ring is
// idle. The drivers section says, per driver, what one reset touches (docs/policy-and-recovery.md).
const (
	// DomainDevice: the device alone (and the forms of its physical unit). The default.
	DomainDevice = "device"
	// DomainNode: every device the driver publishes on the device's node.
	DomainNode = "node"
	// DomainAttributePrefix starts a domain "attribute:<name>": every device of the driver on the
	// device's node that publishes the same value of attribute <name> (a hive, ring or baseboard
	// ID). A device that does not publish it is a domain of its own.
	DomainAttributePrefix = "attribute:"
)

// DomainAttribute returns the attribute a domain names ("attribute:hive" -> "hive"), if it is one.
func DomainAttribute(domain string) (string, bool) {
	name, ok := strings.CutPrefix(domain, DomainAttributePrefix)
	return name, ok && name != ""
}

// validDomain checks a driver's resetDomain.
func validDomain(domain string) error {
	if _, ok := DomainAttribute(domain); ok || domain == DomainDevice || domain == DomainNode {
		return nil
	}
	return fmt.Errorf("resetDomain %q: want %s, %s or %s<attribute> (the attribute its devices share with the devices a reset reaches)",
		domain, DomainDevice, DomainNode, DomainAttributePrefix)
}

// ResetDomain is what a reset of one of the driver's devices reaches (DomainDevice when the file
// does not say).
func (s *Set) ResetDomain(driver string) string {
	if d := s.domains[driver]; d != "" {
		return d
	}
	return DomainDevice
}

// Publishes is what a driver publishes: for each of its devices, its attributes' names.
type Publishes map[string][]string

// CheckDomains refuses a driver's resetDomain attribute that none of its published devices has: a
// reset would then be taken to reach the device alone, which is what the policy said it does not.
// A driver that publishes no device yet is not judged.
func (s *Set) CheckDomains(published map[string]Publishes) error {
	for driver, domain := range s.domains {
		name, ok := DomainAttribute(domain)
		devices := published[driver]
		if !ok || len(devices) == 0 {
			continue
		}
		found := false
		for _, attrs := range devices {
			for _, a := range attrs {
				found = found || a == name || a == driver+"/"+name
			}
		}
		if !found {
			return fmt.Errorf("drivers.%s.resetDomain %q: none of the driver's %d published devices has attribute %q; name one its devices publish (kubectl get resourceslices -o yaml), or say %s or %s",
				driver, domain, len(devices), name, DomainDevice, DomainNode)
		}
	}
	return nil
}
