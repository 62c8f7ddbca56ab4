// Package watcher reads device health from the cluster and signals one Temporal workflow per device.
package watcher

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// MaxMessageLen is the longest driver message kept; the API cuts messages at this length too.
const MaxMessageLen = 1024

// Reasons a health report could not be resolved to a device. They are metric label values.
const (
	ReasonUnknownHealth         = "unknown_health"
	ReasonDevicePluginMalformed = "device_plugin_malformed"
	ReasonClaimRefUnknown       = "claim_reference_unknown"
	ReasonClaimNotGenerated     = "claim_not_generated"
	ReasonClaimNotFound         = "claim_not_found"
	ReasonClaimNotAllocated     = "claim_not_allocated"
	ReasonRequestUnmatched      = "request_unmatched"
	// ReasonNotReserved: the Pod is not among the claim's consumers (a terminated Pod whose claim
	// was reallocated since): its report would be pinned on another Pod's device.
	ReasonNotReserved = "not_reserved_for_pod"
	// ReasonAmbiguous: the report could be any of several devices of the claim. It is not dropped:
	// the watcher records it on the Pod and the claim, alerts, and the policy may quarantine every
	// candidate.
	ReasonAmbiguous = "ambiguous"
)

// Report is one health value for one device from one container.
type Report struct {
	Device      device.ID
	DeviceClass string
	Node        string
	Health      device.Health
	Message     string
	Reporter    api.Reporter
	// Source is where the report came from (empty: a Pod's status).
	Source devicemsg.Source
	// Cause is what the detector said made the fault (its code, its recommended action); empty
	// when only the message may say (read when the report is sent).
	Cause cause.Cause
	// Once marks a detector's fault as an event, naming this word of it (a report's generation,
	// an XID's new value): it is withdrawn once the device's workflow has it, whose quarantine
	// then stands for it. Empty: the word stands until its reporter changes it.
	Once string
	// Stands, on a one-time word from a level a detector shows (a recovery action, a failing
	// health watch), is what the word stands as after it is withdrawn, while the level lasts
	// (standing.go).
	Stands string
}

// ResolveError explains why one health entry was not turned into a Report.
type ResolveError struct {
	Reason string
	// Key names the entry: namespace/pod/container/name/resourceID.
	Key string
	// Claim is the namespace/name of the claim involved, when known; a later change to that
	// claim may make the entry resolvable.
	Claim string
	Err   error
	// Ambiguous reports carry the candidates and the report itself.
	Candidates []AllocatedDevice
	Class      func(request string) string
	Health     device.Health
	Message    string
	Reporter   api.Reporter
	Node       string
}

func (e ResolveError) Error() string { return fmt.Sprintf("%s: %s: %v", e.Key, e.Reason, e.Err) }

// ClaimGetter looks up a claim's compact form.
type ClaimGetter func(namespace, name string) (*Claim, bool)

// Naming says how drivers name their devices in CDI device IDs.
type Naming interface {
	// CDIStyles lists the styles the driver's IDs may take (policy.CDIDevice, policy.CDIClaimDevice,
	// policy.CDIAttributePrefix+name); none when unknown.
	CDIStyles(driver string) []string
	// Attribute is the value of a device's attribute as its ResourceSlice publishes it.
	Attribute(id device.ID, name string) (string, bool)
}

// Resolve turns a pod's allocatedResourcesStatus into per-device reports. The device is found
// through the claim's allocation results, never by guessing from the resourceID: kubelet may
// report a CDI device ID there, which only the driver's declared style (cdi) ties to one device.
//
// A Pod that has terminated reports nothing: its status is frozen at its end while its claim may
// already serve another Pod (the API even lists it among the claim's consumers again for a moment
// while the scheduler and the claim controller catch up).
func Resolve(pod *corev1.Pod, claims ClaimGetter, cdi Naming) ([]Report, []ResolveError) {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	entries := 0
	for _, cs := range pod.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			entries += len(rs.Resources)
		}
	}
	reports := make([]Report, 0, entries)
	var errs []ResolveError
	for _, cs := range pod.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, rh := range rs.Resources {
				r, rerr := resolveOne(pod, cs.Name, string(rs.Name), rh, claims, cdi)
				if rerr != nil {
					rerr.Key = strings.Join([]string{pod.Namespace, pod.Name, cs.Name, string(rs.Name), string(rh.ResourceID)}, "/")
					errs = append(errs, *rerr)
					continue
				}
				reports = append(reports, r)
			}
		}
	}
	return reports, errs
}

func resolveOne(pod *corev1.Pod, container, name string, rh corev1.ResourceHealth, claims ClaimGetter, cdi Naming) (Report, *ResolveError) {
	health, err := device.ParseHealth(string(rh.Health))
	if err != nil {
		return Report{}, &ResolveError{Reason: ReasonUnknownHealth, Err: err}
	}
	ref, ok := strings.CutPrefix(name, "claim:")
	if !ok {
		return resolveDevicePlugin(pod, container, name, rh, health)
	}
	podClaim, request, _ := strings.Cut(ref, "/")
	claimName, rerr := claimNameFor(pod, podClaim)
	if rerr != nil {
		return Report{}, rerr
	}
	claimKey := pod.Namespace + "/" + claimName
	claim, found := claims(pod.Namespace, claimName)
	if !found {
		return Report{}, &ResolveError{Reason: ReasonClaimNotFound, Claim: claimKey, Err: fmt.Errorf("claim %s not found", claimKey)}
	}
	if !claim.Allocated {
		return Report{}, &ResolveError{Reason: ReasonClaimNotAllocated, Claim: claimKey, Err: fmt.Errorf("claim %s has no allocation", claimKey)}
	}
	if !slices.Contains(claim.Reserved, string(pod.UID)) {
		return Report{}, &ResolveError{Reason: ReasonNotReserved, Claim: claimKey,
			Err: fmt.Errorf("pod %s/%s (uid %s) is not among the consumers of claim %s: its report is stale", pod.Namespace, pod.Name, pod.UID, claimKey)}
	}
	chosen, n, ok := pick(claim, request, string(rh.ResourceID))
	if n == 0 {
		return Report{}, &ResolveError{Reason: ReasonRequestUnmatched, Claim: claimKey, Err: fmt.Errorf("claim %s has no result for request %q", claimKey, request)}
	}
	reporter := api.Reporter{Namespace: pod.Namespace, Pod: pod.Name, Container: container, Claim: claimName, Health: health}
	if !ok {
		candidates := make([]AllocatedDevice, 0, n)
		for r := range claim.Results() {
			if forRequest(r.Request, request) {
				candidates = append(candidates, r)
			}
		}
		if chosen, ok = matchCDI(candidates, string(rh.ResourceID), claim.UID, cdi); !ok {
			return Report{}, &ResolveError{Reason: ReasonAmbiguous, Claim: claimKey,
				Err:        fmt.Errorf("resourceID %q could be any of the %d devices allocated to claim %s: the driver's CDI style is not declared (drivers.<driver>.cdi in the policy file) or does not match", rh.ResourceID, len(candidates), claimKey),
				Candidates: candidates, Class: claim.class, Health: health, Message: message(rh), Reporter: reporter, Node: pod.Spec.NodeName}
		}
	}
	return Report{
		Device:      device.ID{Driver: chosen.Driver, Pool: chosen.Pool, Device: chosen.Device},
		DeviceClass: claim.class(chosen.Request),
		Node:        pod.Spec.NodeName,
		Health:      health,
		Message:     message(rh),
		Reporter:    reporter,
	}, nil
}

// resolveDevicePlugin: a device-plugin report names the extended resource; the device is the
// plugin's device ID on the pod's node.
func resolveDevicePlugin(pod *corev1.Pod, container, resource string, rh corev1.ResourceHealth, health device.Health) (Report, *ResolveError) {
	id := device.ID{Driver: resource, Pool: pod.Spec.NodeName, Device: string(rh.ResourceID)}
	if !id.Valid() || !id.DevicePlugin() {
		return Report{}, &ResolveError{Reason: ReasonDevicePluginMalformed, Err: fmt.Errorf("device-plugin report %q on node %q with device ID %q is not a valid device", resource, pod.Spec.NodeName, rh.ResourceID)}
	}
	return Report{Device: id, Node: pod.Spec.NodeName, Health: health, Message: message(rh),
		Reporter: api.Reporter{Namespace: pod.Namespace, Pod: pod.Name, Container: container, Health: health}}, nil
}

func message(rh corev1.ResourceHealth) string {
	if rh.Message == nil {
		return ""
	}
	if len(*rh.Message) > MaxMessageLen {
		return (*rh.Message)[:MaxMessageLen]
	}
	return *rh.Message
}

// pick finds, without building a list, what most reports need: how many of the claim's results
// serve the request, and the device the report names when that is plain, that is when the
// request has one device (the ID's form does not matter then: it may be a CDI device ID) or when
// the ID is the canonical <driver>/<pool>/<device> of one of them.
func pick(c *Claim, request, resourceID string) (AllocatedDevice, int, bool) {
	var only, named AllocatedDevice
	n, found := 0, false
	for r := range c.Results() {
		if !forRequest(r.Request, request) {
			continue
		}
		n++
		only = r
		if !found && names(resourceID, r) {
			named, found = r, true
		}
	}
	if n == 1 {
		return only, 1, true
	}
	return named, n, found
}

// forRequest: a result serves the pod's request "" (the whole claim), its request, or one of its
// subrequests.
func forRequest(result, request string) bool {
	if request == "" {
		return true
	}
	rest, ok := strings.CutPrefix(result, request)
	return ok && (rest == "" || strings.HasPrefix(rest, "/"))
}

// names reports whether id is r's canonical <driver>/<pool>/<device> (without building it).
func names(id string, r AllocatedDevice) bool {
	d, p := len(r.Driver), len(r.Pool)
	return len(id) == d+p+len(r.Device)+2 && id[d] == '/' && id[d+1+p] == '/' &&
		id[:d] == r.Driver && id[d+1:d+1+p] == r.Pool && id[d+2+p:] == r.Device
}

// matchCDI picks which of several allocated devices a CDI device ID refers to. Only an exact
// identification is accepted: an ID whose name (after "=") is exactly what one of the driver's
// declared styles makes of one candidate, and of no other. Guessing would quarantine the wrong
// device.
func matchCDI(candidates []AllocatedDevice, resourceID, claimUID string, cdi Naming) (AllocatedDevice, bool) {
	_, name, isCDI := strings.Cut(resourceID, "=")
	if !isCDI || name == "" || cdi == nil {
		return AllocatedDevice{}, false
	}
	var found []AllocatedDevice
	for _, c := range candidates {
		id := device.ID{Driver: c.Driver, Pool: c.Pool, Device: c.Device}
		if slices.ContainsFunc(cdi.CDIStyles(c.Driver), func(style string) bool { return cdiName(style, id, claimUID, cdi) == name }) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		return AllocatedDevice{}, false
	}
	return found[0], true
}

// cdiName is the name (after "=") a driver's CDI device ID gives the device in style; "" when the
// style cannot name it (an attribute the device does not publish, a claim without a UID).
func cdiName(style string, id device.ID, claimUID string, n Naming) string {
	switch style {
	case policy.CDIDevice:
		return id.Device
	case policy.CDIClaimDevice:
		if claimUID == "" {
			return ""
		}
		return claimUID + "-" + id.Device
	}
	if attr, ok := policy.CDIAttribute(style); ok {
		if v, ok := n.Attribute(id, attr); ok {
			return v
		}
	}
	return ""
}

// claimNameFor maps a pod-level claim reference to the ResourceClaim's name, which for a
// template is generated and recorded in the pod's status.
func claimNameFor(pod *corev1.Pod, podClaim string) (string, *ResolveError) {
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.Name != podClaim {
			continue
		}
		if rc.ResourceClaimName != nil {
			return *rc.ResourceClaimName, nil
		}
		for _, s := range pod.Status.ResourceClaimStatuses {
			if s.Name == podClaim && s.ResourceClaimName != nil {
				return *s.ResourceClaimName, nil
			}
		}
		return "", &ResolveError{Reason: ReasonClaimNotGenerated, Err: fmt.Errorf("claim %q of pod %s/%s has no generated ResourceClaim yet", podClaim, pod.Namespace, pod.Name)}
	}
	return "", &ResolveError{Reason: ReasonClaimRefUnknown, Err: fmt.Errorf("pod %s/%s has no claim named %q", pod.Namespace, pod.Name, podClaim)}
}

// ClaimRefs lists the namespace/name of every ResourceClaim a pod uses, so that a claim change
// can re-resolve the pods that depend on it.
func ClaimRefs(pod *corev1.Pod) []string {
	var out []string
	for _, rc := range pod.Spec.ResourceClaims {
		name, err := claimNameFor(pod, rc.Name)
		if err == nil {
			out = append(out, pod.Namespace+"/"+name)
		}
	}
	return out
}

// naming answers Resolve's questions from the policy file and the slices the watcher holds.
type naming struct{ w *Watcher }

func (n naming) CDIStyles(driver string) []string { return n.w.cfg.Policies.CDIStyles(driver) }

func (n naming) Attribute(id device.ID, name string) (string, bool) {
	return n.w.slices.attribute(id, name)
}
