package remediation

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// checkSelector selects every Pod of one check.
func checkSelector(name string) string { return kubeobj.LabelCheck + "=" + name }

// clearStale removes a check left by an earlier review (a worker that died before cleaning up)
// and waits until its Pods, Job and claim are gone. The current review's own check is adopted.
func (v checkPods) clearStale(ctx context.Context, kind decide.ActionKind, ns, name string, review int) error {
	a := v.a
	var labels map[string]string
	var deleting bool
	if kind == decide.ActCanary {
		j, err := a.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("get job %s/%s: %w", ns, name, err)
		}
		if err == nil {
			labels, deleting = j.Labels, j.DeletionTimestamp != nil
		}
	} else {
		p, err := a.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("get pod %s/%s: %w", ns, name, err)
		}
		if err == nil {
			labels, deleting = p.Labels, p.DeletionTimestamp != nil
		}
	}
	if labels != nil && labels[kubeobj.LabelReview] == strconv.Itoa(review) && !deleting {
		return nil
	}
	v.deleteCheck(ns, name)
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		activity.RecordHeartbeat(ctx, "clearing "+name)
		pods, err := a.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: checkSelector(name)})
		if err != nil || len(pods.Items) > 0 {
			return false, nil
		}
		_, jerr := a.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		_, cerr := a.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(jerr) && apierrors.IsNotFound(cerr), nil
	})
}

// createCheck creates the check's claim and its Pod (probe) or Job (canary).
func (v checkPods) createCheck(ctx context.Context, in CheckInput, ns, name, sel, node string, env []corev1.EnvVar) error {
	a := v.a
	claim, pod, job := CheckObjects(in, ns, name, sel, node, env)
	if _, err := a.Kube.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s claim %s/%s: %w", in.Kind, ns, name, checkNamespaceError(ns, err))
	}
	var err error
	if job != nil {
		_, err = a.Kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{FieldManager: kubeobj.FieldManager})
	} else {
		_, err = a.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{FieldManager: kubeobj.FieldManager})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s %s/%s: %w", in.Kind, ns, name, checkNamespaceError(ns, err))
	}
	return nil
}

// CheckObjects are what a check creates: its claim, which only the device (sel, on node) can
// satisfy and which tolerates the taint of its stage, and its Pod (a probe or repair step) or Job
// (a canary: job set, pod nil). A test applies them to an apiserver to check a policy's checks.
func CheckObjects(in CheckInput, ns, name, sel, node string, env []corev1.EnvVar) (*resourcev1.ResourceClaim, *corev1.Pod, *batchv1.Job) {
	labels := map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, kubeobj.LabelRole: string(in.Kind), kubeobj.LabelReview: strconv.Itoa(in.Review),
		kubeobj.LabelDevice: kubeobj.LabelValue(in.Device.Device), kubeobj.LabelCheck: name}
	annotations := map[string]string{kubeobj.AnnotationDevice: in.Device.String(), kubeobj.AnnotationWorkflow: in.WorkflowID}
	tolerate := decide.TaintQuarantine
	if in.Kind == decide.ActCanary {
		tolerate = decide.TaintProbation
	}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "device",
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: in.DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Selectors:   []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: sel}}},
				Tolerations: []resourcev1.DeviceToleration{{Key: tolerate, Operator: resourcev1.DeviceTolerationOpExists}},
			},
		}}}},
	}
	spec := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(0)),
		ResourceClaims:                []corev1.PodResourceClaim{{Name: "device", ResourceClaimName: ptr.To(name)}},
		Containers: []corev1.Container{{
			Name: string(in.Kind), Image: in.Check.Image, Command: in.Check.Command, Env: env,
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "device"}}},
		}},
		// Nodes may be tainted while their devices are reviewed; the check must still run there.
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
	}
	if node != "" {
		spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations}
	if in.Kind == decide.ActCanary {
		return claim, nil, &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(0)), Parallelism: ptr.To(int32(1)), Completions: ptr.To(int32(1)),
			ActiveDeadlineSeconds: ptr.To(int64(in.Check.Timeout.D().Seconds()) + 1),
			Template:              corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}, Spec: spec},
		}}
	}
	return claim, &corev1.Pod{ObjectMeta: meta, Spec: spec}, nil
}

// checkPod returns the name of the check's Pod: the probe Pod itself, or the Pod the canary Job
// made ("" if none appeared before the deadline).
func (v checkPods) checkPod(ctx context.Context, ns, name string, deadline time.Time) (string, error) {
	a := v.a
	var pod string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Until(deadline), true, func(ctx context.Context) (bool, error) {
		activity.RecordHeartbeat(ctx, name)
		pods, err := a.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: checkSelector(name)})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				pod = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	if pod == "" && ctx.Err() == nil {
		return "", nil
	}
	return pod, err
}

// deleteCheck removes a check's Job, Pods and claim; it runs even when the activity's context ended.
func (v checkPods) deleteCheck(ns, name string) {
	a := v.a
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	warn := func(what string, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			slog.Default().Warn("delete check "+what+" failed", "check", ns+"/"+name, "error", err)
		}
	}
	warn("job", a.Kube.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}))
	warn("pods", a.Kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))},
		metav1.ListOptions{LabelSelector: checkSelector(name)}))
	warn("claim", a.Kube.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}))
}
