package remediation

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func TestAttrExpr(t *testing.T) {
	attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"index":                      {IntValue: ptr.To(int64(3))},
		"node":                       {StringValue: ptr.To(`n"1`)},
		"gpu.example.com/uuid":       {StringValue: ptr.To("GPU-abc")},
		"vendor.example.com/healthy": {BoolValue: ptr.To(true)},
		"driverVersion":              {VersionValue: ptr.To("1.2.3")},
		"empty":                      {},
	}
	tests := []struct{ name, want, err string }{
		{"index", `device.attributes["gpu.example.com"].index == 3`, ""},
		{"node", `device.attributes["gpu.example.com"].node == "n\"1"`, ""},
		{"uuid", `device.attributes["gpu.example.com"].uuid == "GPU-abc"`, ""},
		{"gpu.example.com/uuid", `device.attributes["gpu.example.com"].uuid == "GPU-abc"`, ""},
		{"vendor.example.com/healthy", `device.attributes["vendor.example.com"].healthy == true`, ""},
		{"driverVersion", `device.attributes["gpu.example.com"].driverVersion.compareTo(semver("1.2.3")) == 0`, ""},
		{"serial", "", `no attribute "serial"`},
		{"empty", "", "no value"},
	}
	for _, tt := range tests {
		got, err := kubeobj.AttrExpr("gpu.example.com", tt.name, attrs)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %q %v, want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestCheckOutcome(t *testing.T) {
	status := func(phase corev1.PodPhase, health corev1.ResourceHealthStatus, exit int32) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: "Error", Message: "XID 79"}},
		}}}}
		if health != "" {
			p.Status.ContainerStatuses[0].AllocatedResourcesStatus = []corev1.ResourceStatus{{Name: "claim:device",
				Resources: []corev1.ResourceHealth{{ResourceID: "gpu=1", Health: health, Message: ptr.To("bad")}}}}
		}
		return p
	}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		done, pass bool
		reason     string
	}{
		{"running", status(corev1.PodRunning, "", 0), false, false, ""},
		{"pending", status(corev1.PodPending, "", 0), false, false, ""},
		{"succeeded, no reports", status(corev1.PodSucceeded, "", 0), true, true, "exited 0, device Healthy"},
		{"succeeded, healthy", status(corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy, 0), true, true, "exited 0, device Healthy"},
		{"succeeded, unknown device", status(corev1.PodSucceeded, corev1.ResourceHealthStatusUnknown, 0), true, false, "exited 0 but its device reported gpu=1 Unknown: bad"},
		{"failed", status(corev1.PodFailed, "", 1), true, false, "exit code 1 Error XID 79"},
		{"failed, unhealthy", status(corev1.PodFailed, corev1.ResourceHealthStatusUnhealthy, 1), true, false, "exit code 1 Error XID 79; device reported gpu=1 Unhealthy: bad"},
	}
	for _, tt := range tests {
		res, done := checkOutcome(tt.pod, policy.Check{})
		if done != tt.done || res.Passed != tt.pass || res.Reason != tt.reason || res.NotRun {
			t.Errorf("%s: done=%t %+v", tt.name, done, res)
		}
	}
}

// A Pod whose tool never ran on the device is done and not run, whatever else it says: the
// tooling failed, not the device. An exit code is the tool's only where the check names it.
func TestCheckOutcomeNotRun(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "check",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "pull access denied"}}}}}}
	}
	exited := func(code int32) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "check",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", Message: "in use by another client"}}}}}}
	}
	evicted := exited(137)
	evicted.Status.Reason, evicted.Status.Message = "Evicted", "The node was low on resource: memory."
	disrupted := exited(143)
	disrupted.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler", Message: "preempted"}}
	inUse := policy.Check{NotRunExitCodes: []int32{3}}
	for _, tt := range []struct {
		name   string
		pod    *corev1.Pod
		check  policy.Check
		notRun bool
		reason string
	}{
		{"image back-off", waiting("ImagePullBackOff"), policy.Check{}, true, "container check not started: ImagePullBackOff pull access denied"},
		{"bad image name", waiting("InvalidImageName"), policy.Check{}, true, "InvalidImageName"},
		{"never pull", waiting("ErrImageNeverPull"), policy.Check{}, true, "ErrImageNeverPull"},
		{"config error", waiting("CreateContainerConfigError"), policy.Check{}, true, "CreateContainerConfigError"},
		{"creating", waiting("ContainerCreating"), policy.Check{}, false, ""},
		{"first failed pull", waiting("ErrImagePull"), policy.Check{}, false, ""},
		{"evicted", evicted, policy.Check{}, true, "Pod failed before its check ended: Evicted The node was low on resource: memory."},
		{"preempted", disrupted, policy.Check{}, true, "Pod disrupted (PreemptionByScheduler): preempted"},
		{"the tool's in-use code", exited(3), inUse, true, "the tool could not run: exit code 3 (the policy's notRunExitCodes) Error in use by another client"},
		{"another code", exited(1), inUse, false, "exit code 1 Error in use by another client"},
		{"the code unnamed", exited(3), policy.Check{}, false, "exit code 3 Error in use by another client"},
	} {
		res, done := checkOutcome(tt.pod, tt.check)
		if res.NotRun != tt.notRun || res.Passed || (tt.notRun || tt.reason != "") != done || !strings.Contains(res.Reason, tt.reason) {
			t.Errorf("%s: done=%t %+v", tt.name, done, res)
		}
	}
}

func TestLastOtherWriter(t *testing.T) {
	at := func(s int) *metav1.Time { return &metav1.Time{Time: time.Unix(int64(s), 0)} }
	fields := []metav1.ManagedFieldsEntry{
		{Manager: kubeobj.FieldManager, Time: at(300)},
		{Manager: "kubectl-edit", Time: at(200)},
		{Manager: "argocd", Time: at(100)},
		{Manager: "no-time"},
	}
	if got := lastOtherWriter(fields); got != "kubectl-edit" {
		t.Fatalf("got %q", got)
	}
	if got := lastOtherWriter(fields[:1]); got != "" {
		t.Fatalf("only DeviceWarden wrote it, got %q", got)
	}
}
