package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// CDIDeviceID is a resourceID kubelet could report for a simulated device in a single-device
// claim: a CDI device ID that does not spell out driver/pool/device (any form resolves there).
func CDIDeviceID(id device.ID) string {
	return "k8s." + id.Driver + "/gpu=" + id.Pool + "-" + id.Device
}

// CDIStyle is how the simulated driver names its devices in the CDI device IDs kubelet reports as
// resourceIDs, as real drivers do in their own ways.
type CDIStyle string

// CDI styles of the simulated driver.
const (
	// CDIClaimDevice: k8s.<driver>/gpu=<claim-uid>-<device> (the default; declare it in the policy
	// file as drivers.<driver>.cdi: claim-device).
	CDIClaimDevice CDIStyle = "claim-device"
	// CDIDevice: k8s.<driver>/gpu=<device> (cdi: device).
	CDIDevice CDIStyle = "device"
	// CDICanonical: <driver>/<pool>/<device>, which needs no declaration.
	CDICanonical CDIStyle = "canonical"
	// CDIUUID: k8s.<driver>/gpu=<the device's uuid attribute> (cdi: attribute:uuid).
	CDIUUID CDIStyle = "uuid"
	// CDIOpaque: k8s.<driver>/gpu=<hash>: nothing ties it to one device of a multi-device claim.
	CDIOpaque CDIStyle = "opaque"
)

// CDIStyles lists the styles, for flags.
var CDIStyles = []CDIStyle{CDIClaimDevice, CDIDevice, CDIUUID, CDICanonical, CDIOpaque}

// DeclaredCDIStyles are the policy styles that identify the simulated driver's devices in every
// style it writes except opaque (the set a policy file would declare for it).
var DeclaredCDIStyles = []string{policy.CDIClaimDevice, policy.CDIDevice, policy.CDIAttributePrefix + AttrUUID}

// UUID is the uuid attribute the simulated driver publishes for a device, shaped like a GPU UUID.
func UUID(id device.ID) string {
	sum := sha256.Sum256([]byte(id.String()))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ResourceID is the resourceID kubelet reports for the device of a claim in the given style.
func ResourceID(style CDIStyle, id device.ID, claimUID string) string {
	prefix := "k8s." + id.Driver + "/gpu="
	switch style {
	case CDIDevice:
		return prefix + id.Device
	case CDICanonical:
		return id.String()
	case CDIUUID:
		return prefix + UUID(id)
	case CDIOpaque:
		sum := sha256.Sum256([]byte(claimUID + id.String()))
		return prefix + hex.EncodeToString(sum[:8])
	}
	return prefix + claimUID + "-" + id.Device
}

// Target is one container entry that reports a device's health.
type Target struct {
	Namespace string
	Pod       string
	Container string
	// EntryName is "claim:<podClaim>" or "claim:<podClaim>/<request>".
	EntryName string
	// ClaimUID is the UID of the claim the device was allocated through.
	ClaimUID string
}

// Targets finds every pod container that holds the device, through the claims allocated it.
func Targets(ctx context.Context, cs kubernetes.Interface, id device.ID) ([]Target, error) {
	claims, err := cs.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	var out []Target
	for i := range claims.Items {
		c := &claims.Items[i]
		requests := requestsHolding(c, id)
		if len(requests) == 0 {
			continue
		}
		for _, ref := range c.Status.ReservedFor {
			if ref.Resource != "pods" {
				continue
			}
			pod, err := cs.CoreV1().Pods(c.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("get pod %s/%s: %w", c.Namespace, ref.Name, err)
			}
			for _, t := range podTargets(pod, c.Name, requests) {
				t.ClaimUID = string(c.UID)
				out = append(out, t)
			}
		}
	}
	return out, nil
}

func requestsHolding(c *resourcev1.ResourceClaim, id device.ID) map[string]bool {
	if c.Status.Allocation == nil {
		return nil
	}
	reqs := map[string]bool{}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == id.Driver && r.Pool == id.Pool && r.Device == id.Device {
			reqs[r.Request] = true
		}
	}
	return reqs
}

// claimName is the ResourceClaim a pod-level claim refers to: named, or generated from a template
// and recorded in the pod's status ("" until then).
func claimName(pod *corev1.Pod, rc corev1.PodResourceClaim) string {
	if rc.ResourceClaimName != nil {
		return *rc.ResourceClaimName
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == rc.Name && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

// podTargets lists the containers of pod that use claim (by its ResourceClaim name).
func podTargets(pod *corev1.Pod, claim string, requests map[string]bool) []Target {
	var out []Target
	for _, rc := range pod.Spec.ResourceClaims {
		if claimName(pod, rc) != claim {
			continue
		}
		for _, ctr := range pod.Spec.Containers {
			for _, cc := range ctr.Resources.Claims {
				if cc.Name != rc.Name || (cc.Request != "" && !requests[cc.Request]) {
					continue
				}
				entry := "claim:" + cc.Name
				if cc.Request != "" {
					entry += "/" + cc.Request
				}
				out = append(out, Target{Namespace: pod.Namespace, Pod: pod.Name, Container: ctr.Name, EntryName: entry})
			}
		}
	}
	return out
}

// SetHealth writes the device's health into the status of every pod holding it, as kubelet does,
// with the default CDI style, and returns how many containers it wrote.
func SetHealth(ctx context.Context, cs kubernetes.Interface, id device.ID, health corev1.ResourceHealthStatus, message string) (int, error) {
	return SetHealthStyle(ctx, cs, id, health, message, CDIClaimDevice)
}

// SetHealthStyle is SetHealth with resourceIDs in the given CDI style.
func SetHealthStyle(ctx context.Context, cs kubernetes.Interface, id device.ID, health corev1.ResourceHealthStatus, message string, style CDIStyle) (int, error) {
	targets, err := Targets(ctx, cs, id)
	if err != nil {
		return 0, err
	}
	if len(targets) == 0 {
		return 0, fmt.Errorf("no running pod holds device %s", id)
	}
	for _, t := range targets {
		if err := WriteHealth(ctx, cs, t, ResourceID(style, id, t.ClaimUID), health, message); err != nil {
			return 0, err
		}
	}
	return len(targets), nil
}

// WriteHealth sets one resource's health in one container's allocatedResourcesStatus, keeping every
// other entry as it was.
func WriteHealth(ctx context.Context, cs kubernetes.Interface, t Target, resourceID string, health corev1.ResourceHealthStatus, message string) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := cs.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get pod %s/%s: %w", t.Namespace, t.Pod, err)
		}
		if !SetEntry(pod, t, resourceID, health, message) {
			return fmt.Errorf("pod %s/%s has no status for container %s yet", t.Namespace, t.Pod, t.Container)
		}
		_, err = cs.CoreV1().Pods(t.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

// SetEntry sets one resource's health in a pod object (not yet written); false if the container has no status.
func SetEntry(pod *corev1.Pod, t Target, resourceID string, health corev1.ResourceHealthStatus, message string) bool {
	var msg *string
	if message != "" {
		msg = &message
	}
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		if cs.Name != t.Container {
			continue
		}
		for j := range cs.AllocatedResourcesStatus {
			rs := &cs.AllocatedResourcesStatus[j]
			if string(rs.Name) != t.EntryName {
				continue
			}
			for k := range rs.Resources {
				if string(rs.Resources[k].ResourceID) == resourceID {
					rs.Resources[k].Health, rs.Resources[k].Message = health, msg
					return true
				}
			}
			rs.Resources = append(rs.Resources, corev1.ResourceHealth{ResourceID: corev1.ResourceID(resourceID), Health: health, Message: msg})
			return true
		}
		cs.AllocatedResourcesStatus = append(cs.AllocatedResourcesStatus, corev1.ResourceStatus{
			Name:      corev1.ResourceName(t.EntryName),
			Resources: []corev1.ResourceHealth{{ResourceID: corev1.ResourceID(resourceID), Health: health, Message: msg}},
		})
		return true
	}
	return false
}

// SetPluginHealth writes a device-plugin device's health into a pod's status as kubelet does: the
// entry is named after the extended resource and the resource ID is the plugin's device ID.
func SetPluginHealth(ctx context.Context, cs kubernetes.Interface, namespace, pod, deviceID string, health corev1.ResourceHealthStatus, message string) error {
	return WriteHealth(ctx, cs, Target{Namespace: namespace, Pod: pod, Container: "main", EntryName: PluginResource}, deviceID, health, message)
}
