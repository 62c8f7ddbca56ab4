package watcher

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

const drv = "gpu.sim.devicewarden.io"

// podUID is the UID of the pods podWith builds; claimWith's claims are reserved for it.
const podUID = "0b1d-pod"

func claimWith(name string, results ...resourcev1.DeviceRequestAllocationResult) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
			Devices: resourcev1.DeviceAllocationResult{Results: results}},
			ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod", UID: podUID}}},
	}
}

func result(request, dev string) resourcev1.DeviceRequestAllocationResult {
	return resourcev1.DeviceRequestAllocationResult{Request: request, Driver: drv, Pool: "node-1", Device: dev}
}

// podWith builds a pod using one template-generated claim "gpu" -> ResourceClaim "pod-gpu-abc".
func podWith(entries ...corev1.ResourceStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod", Namespace: "ns", ResourceVersion: "42", UID: podUID},
		Spec: corev1.PodSpec{NodeName: "node-1", ResourceClaims: []corev1.PodResourceClaim{
			{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")},
			{Name: "direct", ResourceClaimName: ptr.To("direct-claim")},
			{Name: "pending", ResourceClaimTemplateName: ptr.To("tmpl")},
		}},
		Status: corev1.PodStatus{
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("pod-gpu-abc")}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "main", AllocatedResourcesStatus: entries}},
		},
	}
}

func healthEntry(name, id, health string, msg *string) corev1.ResourceStatus {
	return corev1.ResourceStatus{Name: corev1.ResourceName(name), Resources: []corev1.ResourceHealth{
		{ResourceID: corev1.ResourceID(id), Health: corev1.ResourceHealthStatus(health), Message: msg}}}
}

func TestStaleReportOfAPodTheClaimNoLongerServes(t *testing.T) {
	c := claimWith("direct-claim", result("a", "gpu-1"))
	get := func(ns, name string) (*Claim, bool) { return compactClaim(c, nil), name == "direct-claim" }
	pod := podWith(healthEntry("claim:direct/a", "x", "Unhealthy", nil))
	if reports, errs := Resolve(pod, get, nil); len(reports) != 1 || len(errs) != 0 {
		t.Fatalf("the consumer's report: %v %v", reports, errs)
	}
	// The claim was reallocated for another Pod; the old Pod (kept, terminated) still shows its report.
	c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "next", UID: "9e2a-next"}}
	reports, errs := Resolve(pod, get, nil)
	if len(reports) != 0 || len(errs) != 1 || errs[0].Reason != ReasonNotReserved || errs[0].Claim != "ns/direct-claim" {
		t.Fatalf("stale report: %v %+v", reports, errs)
	}
	// A terminated Pod reports nothing, even while it is still listed as a consumer.
	c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: "pod", UID: podUID})
	done := pod.DeepCopy()
	done.Status.Phase = corev1.PodFailed
	if reports, errs := Resolve(done, get, nil); len(reports) != 0 || len(errs) != 0 {
		t.Fatalf("terminated pod: %v %v", reports, errs)
	}
	if stripPod(done).Status.Phase != corev1.PodFailed {
		t.Fatal("the kept copy of a pod loses its phase")
	}
	// A Pod with the same name but another UID (re-created) is not the consumer either.
	c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod", UID: "other-uid"}}
	if _, errs := Resolve(pod, get, nil); len(errs) != 1 || errs[0].Reason != ReasonNotReserved {
		t.Fatalf("same name, other UID: %+v", errs)
	}
}

func TestResolveCDIStyles(t *testing.T) {
	c := claimWith("direct-claim", result("a", "gpu-1"), result("a", "gpu-2"), result("a", "gpu-12"))
	c.UID = "6f1c"
	get := func(ns, name string) (*Claim, bool) { return compactClaim(c, nil), name == "direct-claim" }
	uuids := map[string]string{"gpu-1": "GPU-11", "gpu-2": "GPU-22", "gpu-12": "GPU-22"} // gpu-12 shares gpu-2's: a broken driver
	styles := func(style ...string) Naming { return testNaming{styles: style, attrs: uuids} }
	tests := []struct {
		name, id string
		style    []string
		want     string
	}{
		{"claim-device", "k8s." + drv + "/gpu=6f1c-gpu-2", []string{policy.CDIClaimDevice}, "gpu-2"},
		{"claim-device, a longer name sharing a suffix", "k8s." + drv + "/gpu=6f1c-gpu-12", []string{policy.CDIClaimDevice}, "gpu-12"},
		{"claim-device, another claim's UID", "k8s." + drv + "/gpu=ffff-gpu-2", []string{policy.CDIClaimDevice}, ""},
		{"device name", "vendor.com/gpu=gpu-1", []string{policy.CDIDevice}, "gpu-1"},
		{"device name, style not declared", "vendor.com/gpu=gpu-1", nil, ""},
		{"device name under the claim style", "vendor.com/gpu=gpu-1", []string{policy.CDIClaimDevice}, ""},
		{"not a CDI ID", "gpu-1", []string{policy.CDIDevice}, ""},
		{"canonical always works", drv + "/node-1/gpu-12", nil, "gpu-12"},
		{"uuid attribute", "k8s." + drv + "/gpu=GPU-11", []string{"attribute:uuid"}, "gpu-1"},
		{"uuid attribute two devices publish", "k8s." + drv + "/gpu=GPU-22", []string{"attribute:uuid"}, ""},
		{"attribute no device publishes", "k8s." + drv + "/gpu=GPU-11", []string{"attribute:serial"}, ""},
		{"empty name never matches a missing attribute", "k8s." + drv + "/gpu=", []string{"attribute:serial"}, ""},
		{"one of several declared styles", "vendor.com/gpu=6f1c-gpu-1", []string{"attribute:uuid", policy.CDIClaimDevice}, "gpu-1"},
		{"two styles naming different devices", "vendor.com/gpu=gpu-12", []string{policy.CDIDevice, "attribute:x"}, "gpu-12"},
	}
	for _, tt := range tests {
		reports, errs := Resolve(podWith(healthEntry("claim:direct/a", tt.id, "Unhealthy", nil)), get, styles(tt.style...))
		if tt.want == "" {
			if len(reports) != 0 || len(errs) != 1 || errs[0].Reason != ReasonAmbiguous || len(errs[0].Candidates) != 3 ||
				errs[0].Health != device.Unhealthy || errs[0].Reporter.Pod != "pod" {
				t.Errorf("%s: reports %v errs %+v, want one ambiguous report with 3 candidates", tt.name, reports, errs)
			}
			continue
		}
		if len(errs) != 0 || len(reports) != 1 || reports[0].Device.Device != tt.want {
			t.Errorf("%s: reports %v errs %v, want %s", tt.name, reports, errs, tt.want)
		}
	}
}

func TestResolve(t *testing.T) {
	claims := map[string]*resourcev1.ResourceClaim{
		"pod-gpu-abc":  claimWith("pod-gpu-abc", result("gpus", "gpu-3")),
		"direct-claim": claimWith("direct-claim", result("a", "gpu-1"), result("a", "gpu-2"), result("b/small", "gpu-5")),
	}
	get := func(ns, name string) (*Claim, bool) {
		c, ok := claims[name]
		if !ok {
			return nil, false
		}
		return compactClaim(c, nil), true
	}
	long := strings.Repeat("x", 5000)
	tests := []struct {
		name       string
		entry      corev1.ResourceStatus
		wantDevice string
		wantReason string
		wantDP     string
	}{
		{name: "template claim, CDI-style ID resolved through allocation", entry: healthEntry("claim:gpu", "k8s.gpu.sim.devicewarden.io/gpu=node-1-gpu-3", "Unhealthy", nil), wantDevice: "gpu-3"},
		{name: "request named", entry: healthEntry("claim:gpu/gpus", "anything", "Unknown", nil), wantDevice: "gpu-3"},
		{name: "several devices, exact canonical ID", entry: healthEntry("claim:direct/a", drv+"/node-1/gpu-2", "Unhealthy", nil), wantDevice: "gpu-2"},
		{name: "subrequest of prioritized list", entry: healthEntry("claim:direct/b", "x", "Unhealthy", nil), wantDevice: "gpu-5"},
		{name: "several devices, ID matches none", entry: healthEntry("claim:direct/a", "vendor/gpu=uuid-9", "Unhealthy", nil), wantReason: ReasonAmbiguous},
		{name: "malformed resourceID", entry: healthEntry("claim:direct/a", "///", "Unhealthy", nil), wantReason: ReasonAmbiguous},
		{name: "unknown health from an old client", entry: healthEntry("claim:gpu", "x", "Degraded", nil), wantReason: ReasonUnknownHealth},
		{name: "empty health", entry: healthEntry("claim:gpu", "x", "", nil), wantReason: ReasonUnknownHealth},
		{name: "device plugin resource: node + resource + device ID", entry: healthEntry("example.com/gpu", "dev-1", "Unhealthy", nil), wantDP: "example.com/gpu/node-1/dev-1"},
		{name: "device plugin with a malformed device ID", entry: healthEntry("example.com/gpu", "a/b", "Unhealthy", nil), wantReason: ReasonDevicePluginMalformed},
		{name: "claim name not in pod", entry: healthEntry("claim:nope", "x", "Unhealthy", nil), wantReason: ReasonClaimRefUnknown},
		{name: "template claim not generated yet", entry: healthEntry("claim:pending", "x", "Unhealthy", nil), wantReason: ReasonClaimNotGenerated},
		{name: "request not in allocation", entry: healthEntry("claim:direct/zzz", "x", "Unhealthy", nil), wantReason: ReasonRequestUnmatched},
		{name: "message over 1024 chars is cut", entry: healthEntry("claim:gpu", "x", "Unhealthy", &long), wantDevice: "gpu-3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reports, errs := Resolve(podWith(tt.entry), get, nil)
			if tt.wantReason != "" {
				if len(errs) != 1 || errs[0].Reason != tt.wantReason || len(reports) != 0 {
					t.Fatalf("got reports=%v errs=%v, want reason %s", reports, errs, tt.wantReason)
				}
				return
			}
			if len(errs) != 0 || len(reports) != 1 {
				t.Fatalf("got reports=%v errs=%v", reports, errs)
			}
			r := reports[0]
			if tt.wantDP != "" {
				if r.Device.String() != tt.wantDP || !r.Device.DevicePlugin() {
					t.Fatalf("device-plugin device %+v", r.Device)
				}
				return
			}
			if r.Device != (device.ID{Driver: drv, Pool: "node-1", Device: tt.wantDevice}) || r.Node != "node-1" {
				t.Fatalf("resolved %+v", r)
			}
			if len(r.Message) > MaxMessageLen {
				t.Fatalf("message kept %d chars", len(r.Message))
			}
		})
	}
}

func TestResolveClaimGone(t *testing.T) {
	none := func(string, string) (*Claim, bool) { return nil, false }
	_, errs := Resolve(podWith(healthEntry("claim:gpu", "x", "Unhealthy", nil)), none, nil)
	if len(errs) != 1 || errs[0].Reason != ReasonClaimNotFound || errs[0].Claim != "ns/pod-gpu-abc" {
		t.Fatalf("errs = %v", errs)
	}
}

func TestStripKeepsWhatResolveReads(t *testing.T) {
	pod := podWith(healthEntry("claim:gpu", "x", "Unhealthy", nil))
	pod.Labels = map[string]string{"big": strings.Repeat("y", 1000)}
	pod.Spec.Containers = []corev1.Container{{Name: "main", Image: "img"}}
	stripped := stripPod(pod)
	if stripped.Labels != nil || stripped.Spec.Containers != nil {
		t.Fatal("strip kept unused fields")
	}
	get := func(ns, name string) (*Claim, bool) {
		return compactClaim(claimWith("pod-gpu-abc", result("gpus", "gpu-3")), &interner{}), true
	}
	reports, errs := Resolve(stripped, get, nil)
	if len(reports) != 1 || len(errs) != 0 {
		t.Fatalf("stripped pod resolved to %v %v", reports, errs)
	}
}

func TestClaimDeviceConditions(t *testing.T) {
	c := claimWith("c", result("gpus", "gpu-3"), result("gpus", "gpu-4"), result("gpus", "gpu-5"))
	c.Status.Devices = []resourcev1.AllocatedDeviceStatus{
		{Driver: drv, Pool: "node-1", Device: "gpu-3", Conditions: []metav1.Condition{{Type: "Healthy", Status: metav1.ConditionFalse, Reason: "ECC"}}},
		{Driver: drv, Pool: "node-1", Device: "gpu-4", Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "NotConfigured"}}},
		{Driver: drv, Pool: "node-1", Device: "gpu-5", Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}, {Type: "Configured", Status: metav1.ConditionFalse}}},
	}
	got := compactClaim(c, nil).Troubled
	if len(got) != 2 || got[0].Health != device.Unhealthy || got[1].Health != device.Unknown || !strings.Contains(got[0].Message, "ECC") {
		t.Fatalf("troubled = %+v", got)
	}
}

// testNaming declares styles for every driver and answers attribute "uuid" from a map.
type testNaming struct {
	styles []string
	attrs  map[string]string
}

func (n testNaming) CDIStyles(string) []string { return n.styles }

func (n testNaming) Attribute(id device.ID, name string) (string, bool) {
	if name != "uuid" {
		return "", false
	}
	v, ok := n.attrs[id.Device]
	return v, ok
}
