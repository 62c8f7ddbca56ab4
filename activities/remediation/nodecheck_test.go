package remediation

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/sdk/activity"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// afterBootOf runs afterBoot for a node step of node-1 that passed (the node booted from boot-0
// to boot-1), with a kubelet that ends the node check's Pod in phase ("" : never).
func afterBootOf(t *testing.T, phase corev1.PodPhase, check *policy.Check) (decide.StepResult, *Activities, error) {
	t.Helper()
	env, a, kube := activityEnv(t, gpuSlice())
	a.CheckPoll = 50 * time.Millisecond
	seen := map[string]string{}
	// The reactor goes in before the kubelet's goroutine starts reading the fake's reactor chain.
	kube.PrependReactor("create", "*", recordCreate(seen))
	stop := kubelet(kube, phase, corev1.ResourceHealthStatusHealthy)
	defer stop()
	in := NodeInput{Device: gpu3, Node: "node-1", Try: 2, WorkflowID: gpu3.WorkflowID(),
		Step: policy.RepairStep{Kind: policy.RepairNode, NodeCheck: check}}
	booted := decide.StepResult{Passed: true, Reason: "node node-1 booted again", BootID: "boot-1"}
	env.RegisterActivityWithOptions(func(ctx context.Context, in NodeInput) (decide.StepResult, error) {
		return (nodeSteps{a}).afterBoot(ctx, in, booted, "boot-0")
	}, activity.RegisterOptions{Name: "AfterBoot"})
	v, err := env.ExecuteActivity("AfterBoot", in)
	var res decide.StepResult
	if err == nil {
		err = v.Get(&res)
	}
	if check != nil && err == nil {
		// The claim took every device of its class on the node, tolerating every taint, and the
		// Pod was pinned to the node; both are gone after.
		if seen["claim"] != string(resourcev1.DeviceAllocationModeAll)+" tolerates all" || seen["pod"] != "node-1" {
			t.Errorf("made %v", seen)
		}
		name := nodeCheckName(in)
		if _, err := kube.ResourceV1().ResourceClaims("checks").Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("claim left behind: %v", err)
		}
	}
	return res, a, err
}

func TestANodeCheckThatPassesEndsTheStepPassed(t *testing.T) {
	res, a, err := afterBootOf(t, corev1.PodSucceeded, &policy.Check{Image: "nccl", Command: []string{"all_reduce_perf"}, Timeout: policy.JSONDuration(5 * time.Second), Namespace: "checks", DeviceClass: "gpu.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed || res.NotRun || res.BootID != "boot-1" || !strings.Contains(res.Reason, "booted again; node check passed") {
		t.Fatalf("result %+v", res)
	}
	if n := testutil.ToFloat64(a.Metrics.Checks.WithLabelValues(string(ActNodeCheck), "passed")); n != 1 {
		t.Errorf("node checks passed: %v", n)
	}
}

// A node check that fails fails the step: the node booted, but the node is not well.
func TestANodeCheckThatFailsFailsTheStep(t *testing.T) {
	res, _, err := afterBootOf(t, corev1.PodFailed, &policy.Check{Image: "nccl", Command: []string{"all_reduce_perf"}, Timeout: policy.JSONDuration(5 * time.Second), Namespace: "checks", DeviceClass: "gpu.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed || res.NotRun || res.BootID != "boot-1" || !strings.Contains(res.Reason, "but its node check failed: exit code 1") {
		t.Fatalf("result %+v", res)
	}
}

// A node check whose Pod never starts did not run: the step is the tooling's failure, and it
// carries the boot ID from before the reboot, so the try taken again finds the reboot done.
func TestANodeCheckThatNeverStartsDidNotRun(t *testing.T) {
	res, _, err := afterBootOf(t, "", &policy.Check{Image: "nccl", Command: []string{"all_reduce_perf"}, Timeout: policy.JSONDuration(300 * time.Millisecond), Namespace: "checks", DeviceClass: "gpu.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed || !res.NotRun || res.BootID != "boot-0" || !strings.Contains(res.Reason, "node check did not run") {
		t.Fatalf("result %+v", res)
	}
}

// A step without a node check ends as its reboot did.
func TestNoNodeCheckNoPod(t *testing.T) {
	res, _, err := afterBootOf(t, corev1.PodSucceeded, nil)
	if err != nil || !res.Passed || res.Reason != "node node-1 booted again" {
		t.Fatalf("result %+v (%v)", res, err)
	}
}

// recordCreate notes what the node check made: its claim's allocation mode and tolerations, and
// its Pod's node.
func recordCreate(seen map[string]string) k8stesting.ReactionFunc {
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		switch o := action.(k8stesting.CreateAction).GetObject().(type) {
		case *resourcev1.ResourceClaim:
			r := o.Spec.Devices.Requests[0].Exactly
			tol := "tolerates some"
			if len(r.Tolerations) == 1 && r.Tolerations[0].Key == "" && r.Tolerations[0].Operator == resourcev1.DeviceTolerationOpExists {
				tol = "tolerates all"
			}
			seen["claim"] = string(r.AllocationMode) + " " + tol
		case *corev1.Pod:
			seen["pod"] = o.Spec.NodeSelector[corev1.LabelHostname]
		}
		return false, nil, nil
	}
}
