package remediation

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// gpuSlice publishes gpu-3 and gpu-4 of node-1, each with its index.
func gpuSlice() *resourcev1.ResourceSlice {
	dev := func(name string, idx int64) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"index": {IntValue: ptr.To(idx)}}}
	}
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: gpu3.Driver, Pool: resourcev1.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To("node-1"),
		Devices: []resourcev1.Device{dev("gpu-3", 3), dev("gpu-4", 4)}}}
}

// kubelet plays the Job controller and the kubelet for check Pods: it makes the canary Job's Pod
// and finishes every check Pod in phase, until stopped.
func kubelet(kube kubernetes.Interface, phase corev1.PodPhase, health corev1.ResourceHealthStatus) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			jobs, _ := kube.BatchV1().Jobs("checks").List(ctx, metav1.ListOptions{})
			for _, j := range jobs.Items {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-x", Namespace: j.Namespace, Labels: j.Spec.Template.Labels}, Spec: j.Spec.Template.Spec}
				_, _ = kube.CoreV1().Pods(j.Namespace).Create(ctx, p, metav1.CreateOptions{})
			}
			pods, _ := kube.CoreV1().Pods("checks").List(ctx, metav1.ListOptions{})
			for _, p := range pods.Items {
				if p.Status.Phase != "" || phase == "" {
					continue
				}
				p.Status.Phase = phase
				cs := corev1.ContainerStatus{Name: p.Spec.Containers[0].Name,
					AllocatedResourcesStatus: []corev1.ResourceStatus{{Name: "claim:device", Resources: []corev1.ResourceHealth{{ResourceID: "gpu-3", Health: health}}}}}
				if phase == corev1.PodFailed {
					cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "ECC error"}
				}
				p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
				_, _ = kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, &p, metav1.UpdateOptions{})
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func checkIn(kind decide.ActionKind) CheckInput {
	return CheckInput{Device: gpu3, Kind: kind, DeviceClass: "gpu.example.com", Identity: []string{"index"}, Review: 1, WorkflowID: gpu3.WorkflowID(),
		Check: policy.Check{Image: "busybox", Command: []string{"true"}, Timeout: policy.JSONDuration(5 * time.Second), Namespace: "checks"}}
}

// runCheck runs RunCheck against gpuSlice with a kubelet that ends check Pods in phase; setup
// adds reactors to the fake clientset first.
func runCheck(t *testing.T, in CheckInput, phase corev1.PodPhase, health corev1.ResourceHealthStatus, setup ...func(*fake.Clientset)) (decide.StepResult, *Activities, kubernetes.Interface, error) {
	t.Helper()
	env, a, kube := activityEnv(t, gpuSlice())
	a.CheckPoll = 50 * time.Millisecond
	for _, f := range setup {
		f(kube)
	}
	stop := kubelet(kube, phase, health)
	defer stop()
	v, err := env.ExecuteActivity(a.RunCheck, in)
	var res decide.StepResult
	if err == nil {
		err = v.Get(&res)
	}
	return res, a, kube, err
}

func TestRunCheckPasses(t *testing.T) {
	for _, kind := range []decide.ActionKind{decide.ActProbe, decide.ActCanary} {
		t.Run(string(kind), func(t *testing.T) {
			in := checkIn(kind)
			res, a, kube, err := runCheck(t, in, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy)
			if err != nil {
				t.Fatal(err)
			}
			name := CheckName(kind, gpu3)
			if !res.Passed || res.Reason != "exited 0, device Healthy" || !strings.HasPrefix(res.Pod, "checks/"+name) {
				t.Fatalf("result %+v", res)
			}
			if n := testutil.ToFloat64(a.Metrics.Checks.WithLabelValues(string(kind), "passed")); n != 1 {
				t.Errorf("checks metric %v", n)
			}
			// Everything the check made is gone afterwards.
			ctx := context.Background()
			pods, _ := kube.CoreV1().Pods("checks").List(ctx, metav1.ListOptions{})
			_, cerr := kube.ResourceV1().ResourceClaims("checks").Get(ctx, name, metav1.GetOptions{})
			_, jerr := kube.BatchV1().Jobs("checks").Get(ctx, name, metav1.GetOptions{})
			if len(pods.Items) != 0 || !apierrors.IsNotFound(cerr) || !apierrors.IsNotFound(jerr) {
				t.Fatalf("left behind: %d pods, claim %v, job %v", len(pods.Items), cerr, jerr)
			}
		})
	}
}

// The claim can be allocated only the device, tolerating the stage's taint; the Pod goes to its node.
func TestRunCheckPinsTheDevice(t *testing.T) {
	_, a, kube := activityEnv(t, gpuSlice())
	in := checkIn(decide.ActCanary)
	sel, node, env, _, err := (checkPods{a}).pinDevice(context.Background(), in)
	if err != nil || node != "node-1" || sel != `device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].index == 3` {
		t.Fatalf("selector %q node %q err %v", sel, node, err)
	}
	// A reset tool learns which device to act on from its environment.
	wantEnv := []corev1.EnvVar{{Name: "DEVICEWARDEN_DEVICE", Value: "gpu.example.com/node-1/gpu-3"}, {Name: "DEVICEWARDEN_NODE", Value: "node-1"},
		{Name: "DEVICEWARDEN_ATTR_INDEX", Value: "3"}}
	if !reflect.DeepEqual(env, wantEnv) {
		t.Fatalf("env %+v, want %+v", env, wantEnv)
	}
	if err := (checkPods{a}).createCheck(context.Background(), in, "checks", "c", sel, node, env); err != nil {
		t.Fatal(err)
	}
	claim, _ := kube.ResourceV1().ResourceClaims("checks").Get(context.Background(), "c", metav1.GetOptions{})
	req := claim.Spec.Devices.Requests[0].Exactly
	if req.Selectors[0].CEL.Expression != sel || req.Tolerations[0].Key != decide.TaintProbation || req.Count != 1 || req.DeviceClassName != "gpu.example.com" {
		t.Fatalf("claim request %+v", req)
	}
	job, _ := kube.BatchV1().Jobs("checks").Get(context.Background(), "c", metav1.GetOptions{})
	spec := job.Spec.Template.Spec
	if spec.NodeSelector[corev1.LabelHostname] != "node-1" || *job.Spec.BackoffLimit != 0 || *job.Spec.ActiveDeadlineSeconds != 6 ||
		spec.Containers[0].Image != "busybox" || spec.RestartPolicy != corev1.RestartPolicyNever || !reflect.DeepEqual(spec.Containers[0].Env, wantEnv) {
		t.Fatalf("job %+v", job.Spec)
	}
}

func TestRunCheckFails(t *testing.T) {
	t.Run("exit code and device report", func(t *testing.T) {
		res, a, _, err := runCheck(t, checkIn(decide.ActProbe), corev1.PodFailed, corev1.ResourceHealthStatusUnhealthy)
		if err != nil || res.Passed || res.Reason != "exit code 1 Error ECC error; device reported gpu-3 Unhealthy" {
			t.Fatalf("result %+v %v", res, err)
		}
		if n := testutil.ToFloat64(a.Metrics.Checks.WithLabelValues("probe", "failed")); n != 1 {
			t.Errorf("checks metric %v", n)
		}
	})
	t.Run("never finishes", func(t *testing.T) {
		in := checkIn(decide.ActProbe)
		in.Check.Timeout = policy.JSONDuration(time.Second)
		res, _, _, err := runCheck(t, in, "", "")
		if err != nil || res.Passed || !strings.Contains(res.Reason, "probe Pod did not finish within 1s") {
			t.Fatalf("result %+v %v", res, err)
		}
	})
	t.Run("device not published", func(t *testing.T) {
		in := checkIn(decide.ActProbe)
		in.Device = device.ID{Driver: gpu3.Driver, Pool: "node-1", Device: "gpu-9"}
		res, _, _, err := runCheck(t, in, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy)
		if err != nil || res.Passed || !strings.Contains(res.Reason, "is not published in its pool") {
			t.Fatalf("result %+v %v", res, err)
		}
	})
	t.Run("device plugin", func(t *testing.T) {
		in := checkIn(decide.ActProbe)
		in.Device = device.ID{Driver: "example.com/gpu", Pool: "node-1", Device: "GPU-1"}
		res, _, _, err := runCheck(t, in, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy)
		if err != nil || res.Passed || !strings.Contains(res.Reason, "cannot be probed") {
			t.Fatalf("result %+v %v", res, err)
		}
	})
	t.Run("no identity", func(t *testing.T) {
		in := checkIn(decide.ActProbe)
		in.Identity = nil
		_, _, _, err := runCheck(t, in, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != ErrNoIdentity || !app.NonRetryable() {
			t.Fatalf("err %v", err)
		}
	})
}

// A device no claim named a class for is checked through the driver's own class, made once.
func TestRunCheckWithoutAClass(t *testing.T) {
	in := checkIn(decide.ActProbe)
	in.DeviceClass = ""
	res, _, kube, err := runCheck(t, in, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy)
	if err != nil || !res.Passed {
		t.Fatalf("result %+v %v", res, err)
	}
	class, err := kube.ResourceV1().DeviceClasses().Get(context.Background(), CheckClassName(gpu3.Driver), metav1.GetOptions{})
	if err != nil || class.Spec.Selectors[0].CEL.Expression != `device.driver == "gpu.example.com"` {
		t.Fatalf("check class %+v %v", class, err)
	}
}

// A check Pod from an earlier review (a worker that died) is removed before the new one runs;
// this review's own Pod, already finished, is adopted.
func TestRunCheckClearsAnOlderReview(t *testing.T) {
	name := CheckName(decide.ActProbe, gpu3)
	for _, tt := range []struct {
		review string
		reason string
	}{{"0", "exited 0, device Healthy"}, {"1", "exit code 1 Error ECC error"}} {
		t.Run("review "+tt.review, func(t *testing.T) {
			env, a, kube := activityEnv(t, gpuSlice())
			a.CheckPoll = 50 * time.Millisecond
			old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "checks", Labels: map[string]string{kubeobj.LabelReview: tt.review, kubeobj.LabelCheck: name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe"}}},
				Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "probe",
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "ECC error"}}}}}}
			if _, err := kube.CoreV1().Pods("checks").Create(context.Background(), old, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			stop := kubelet(kube, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy)
			defer stop()
			v, err := env.ExecuteActivity(a.RunCheck, checkIn(decide.ActProbe))
			if err != nil {
				t.Fatal(err)
			}
			var res decide.StepResult
			if err := v.Get(&res); err != nil || res.Reason != tt.reason {
				t.Fatalf("result %+v %v, want %q", res, err, tt.reason)
			}
		})
	}
}

// A cluster install may not create namespaces (its chart makes the check namespaces): Forbidden
// on the namespace is not an error, and the check runs in the namespace that is there. When the
// namespace is really missing, the error says where the install lists it.
func TestRunCheckWithoutTheRightToCreateNamespaces(t *testing.T) {
	forbid := func(kube *fake.Clientset) {
		kube.PrependReactor("create", "namespaces", func(action k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), "checks", errors.New("not granted"))
		})
	}
	res, _, _, err := runCheck(t, checkIn(decide.ActProbe), corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy, forbid)
	if err != nil || !res.Passed {
		t.Fatalf("probe without the namespace right: %+v, %v", res, err)
	}

	missing := func(kube *fake.Clientset) {
		kube.PrependReactor("create", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), "checks")
		})
	}
	_, _, _, err = runCheck(t, checkIn(decide.ActProbe), corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy, forbid, missing)
	if err == nil || !strings.Contains(err.Error(), "check namespace checks does not exist") || !strings.Contains(err.Error(), "checks.namespaces") {
		t.Fatalf("probe in a missing namespace: %v", err)
	}
}

// A pool's first publication has generation 0, and while a driver republishes a pool the old
// generation's slice may still be listed: the device is pinned from the newest one.
func TestRunCheckPinsFromTheNewestGeneration(t *testing.T) {
	first := gpuSlice()
	first.Spec.Pool.Generation = 0
	_, a, _ := activityEnv(t, first)
	sel, node, _, _, err := (checkPods{a}).pinDevice(context.Background(), checkIn(decide.ActProbe))
	if err != nil || node != "node-1" || !strings.HasSuffix(sel, "index == 3") {
		t.Fatalf("generation 0: selector %q node %q err %v", sel, node, err)
	}

	newer := gpuSlice()
	newer.Name, newer.Spec.Pool.Generation = "node-1-gpu-b", 2
	newer.Spec.Devices[0].Attributes["index"] = resourcev1.DeviceAttribute{IntValue: ptr.To(int64(7))}
	for _, order := range [][]*resourcev1.ResourceSlice{{gpuSlice(), newer}, {newer, gpuSlice()}} {
		_, a, kube := activityEnv(t)
		for _, s := range order {
			if _, err := kube.ResourceV1().ResourceSlices().Create(context.Background(), s.DeepCopy(), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		sel, _, _, _, err := (checkPods{a}).pinDevice(context.Background(), checkIn(decide.ActProbe))
		if err != nil || !strings.HasSuffix(sel, "index == 7") {
			t.Fatalf("old and new generation listed: selector %q err %v", sel, err)
		}
	}
}
