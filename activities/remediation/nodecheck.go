package remediation

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// NodeCheckObjects are what a node check creates: a claim for every device of class on the node
// (allocationMode All) that tolerates every device taint, and the Pod on the node that uses it.
func NodeCheckObjects(in NodeInput, c policy.Check, class, ns, name string) (*resourcev1.ResourceClaim, *corev1.Pod) {
	labels := map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, kubeobj.LabelRole: string(ActNodeCheck),
		kubeobj.LabelDevice: kubeobj.LabelValue(in.Device.Device), kubeobj.LabelCheck: name}
	annotations := map[string]string{kubeobj.AnnotationDevice: in.Device.String(), kubeobj.AnnotationWorkflow: in.WorkflowID}
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations}
	claim := &resourcev1.ResourceClaim{ObjectMeta: meta, Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{Name: "devices", Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeAll,
			Tolerations: []resourcev1.DeviceToleration{{Operator: resourcev1.DeviceTolerationOpExists}},
		}}}}}}
	pod := &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(0)),
		NodeSelector:                  map[string]string{corev1.LabelHostname: in.Node},
		ResourceClaims:                []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: ptr.To(name)}},
		Containers: []corev1.Container{{Name: string(ActNodeCheck), Image: c.Image, Command: c.Command,
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "devices"}}}}},
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
	}}
	return claim, pod
}

// ActNodeCheck labels a node step's check across the node (its Pod's role and its metric).
const ActNodeCheck decide.ActionKind = "nodecheck"

// nodeCheckName names one try's node check: its Pod and its claim.
func nodeCheckName(in NodeInput) string {
	return "devicewarden-nodecheck-" + nameHash(in.WorkflowID+"/"+strconv.Itoa(in.Try)+"/"+in.TryAt.UTC().Format(time.RFC3339Nano))
}

// afterBoot ends a node step whose node booted again (res passed): with the step's node check,
// when it has one, before any of the node's devices goes back. The check failing fails the step;
// the check not running is the tooling's failure, and its result carries the boot ID from before
// the reboot (before), so the try taken again finds the reboot done and runs only the check.
func (v nodeSteps) afterBoot(ctx context.Context, in NodeInput, res decide.StepResult, before string) (decide.StepResult, error) {
	a := v.a
	c := in.Step.NodeCheck
	if c == nil || !res.Passed {
		return res, nil
	}
	check, err := v.runNodeCheck(ctx, in, *c)
	switch {
	case err != nil || check.NotRun:
		why := check.Reason
		if err != nil {
			why = err.Error()
		}
		a.countCheck(ActNodeCheck, resultNotRun)
		return decide.StepResult{NotRun: true, BootID: before, At: time.Now(), Pod: check.Pod,
			Reason: fmt.Sprintf("%s; its node check did not run: %s", res.Reason, why)}, nil
	case !check.Passed:
		a.countCheck(ActNodeCheck, resultFailed)
		return decide.StepResult{BootID: res.BootID, At: time.Now(), Pod: check.Pod,
			Reason: fmt.Sprintf("%s, but its node check failed: %s", res.Reason, check.Reason)}, nil
	}
	a.countCheck(ActNodeCheck, resultPassed)
	res.Reason += "; node check passed: " + check.Reason
	res.Pod = check.Pod
	return res, nil
}

// runNodeCheck runs one Pod on the node whose claim takes every device of the check's class there
// (allocationMode All), tolerating every device taint: the node's devices are fenced through the
// step. An all-reduce across the node's GPUs is such a check. The Pod and claim are deleted after.
func (v nodeSteps) runNodeCheck(ctx context.Context, in NodeInput, c policy.Check) (decide.StepResult, error) {
	a := v.a
	checks := checkPods{a}
	class := c.DeviceClass
	if class == "" {
		var err error
		if class, err = checks.checkClass(ctx, in.Device.Driver); err != nil {
			return decide.StepResult{}, err
		}
	}
	ns, name := c.Namespace, nodeCheckName(in)
	if err := kubeobj.EnsureNamespace(ctx, a.Kube, ns); err != nil {
		return decide.StepResult{}, err
	}
	defer checks.deleteCheck(ns, name)
	claim, pod := NodeCheckObjects(in, c, class, ns, name)
	if _, err := a.Kube.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return decide.StepResult{}, fmt.Errorf("create node check claim %s/%s: %w", ns, name, checkNamespaceError(ns, err))
	}
	if _, err := a.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return decide.StepResult{}, fmt.Errorf("create node check %s/%s: %w", ns, name, checkNamespaceError(ns, err))
	}
	deadline := time.Now().Add(c.Timeout.D())
	got, err := checks.awaitPod(ctx, ns, name, c, deadline)
	if apierrors.IsNotFound(err) {
		return decide.StepResult{NotRun: true, Pod: ns + "/" + name, Reason: "its Pod was deleted before it finished"}, nil
	}
	if err != nil {
		return decide.StepResult{}, fmt.Errorf("wait for node check %s/%s: %w", ns, name, err)
	}
	res, done := checkOutcome(got, c)
	res.Pod = ns + "/" + name
	switch {
	case res.NotRun:
	case !done && (got.Status.Phase == corev1.PodPending || got.Status.Phase == ""):
		res = decide.StepResult{NotRun: true, Pod: res.Pod, Reason: fmt.Sprintf("its Pod did not start within %s (phase %s%s)", c.Timeout.D(), got.Status.Phase, scheduling(got))}
	case !done:
		res = decide.StepResult{Pod: res.Pod, Reason: fmt.Sprintf("its Pod did not finish within %s (phase %s)", c.Timeout.D(), got.Status.Phase)}
	}
	return res, nil
}
