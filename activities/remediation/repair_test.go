package remediation

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// allocated is a claim in ns allocated the devices.
func allocated(ns, name string, ids ...device.ID) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: resourcev1.ResourceClaimStatus{
		Allocation: &resourcev1.AllocationResult{}, ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: name + "-pod", UID: "u"}}}}
	for _, id := range ids {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourcev1.DeviceRequestAllocationResult{Request: "r", Driver: id.Driver, Pool: id.Pool, Device: id.Device})
	}
	return c
}

// A repair step never runs under a workload: with another claim still allocated the device (or a
// form of its unit), it runs nothing and says Busy. Claims of other devices, and its own claim from
// an attempt a worker died in, do not count.
func TestRepairRunsOnlyOnAnIdleDevice(t *testing.T) {
	sibling := device.ID{Driver: gpu3.Driver, Pool: gpu3.Pool, Device: "gpu-3-mig-a"}
	for _, tt := range []struct {
		name   string
		claims []*resourcev1.ResourceClaim
		busy   string
	}{
		{"held by a workload", []*resourcev1.ResourceClaim{allocated("team", "train", gpu3)}, "claim team/train is still allocated"},
		{"a form of its unit held", []*resourcev1.ResourceClaim{allocated("team", "infer", sibling)}, "claim team/infer is still allocated"},
		{"idle", []*resourcev1.ResourceClaim{allocated("team", "other", device.ID{Driver: gpu3.Driver, Pool: gpu3.Pool, Device: "gpu-4"})}, ""},
		{"only its own claim", []*resourcev1.ResourceClaim{allocated("checks", CheckName(decide.ActRepair, gpu3), gpu3)}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := checkIn(decide.ActRepair)
			in.Idle, in.Step = []device.ID{gpu3, sibling}, "reset"
			res, a, kube, err := runCheck(t, in, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy, func(cs *fake.Clientset) {
				for _, c := range tt.claims {
					if err := cs.Tracker().Add(c); err != nil {
						t.Fatal(err)
					}
					if err := cs.Tracker().Add(holderPod(c)); err != nil {
						t.Fatal(err)
					}
				}
				if err := cs.Tracker().Add(rebootNode("node-1", "boot-1", true)); err != nil {
					t.Fatal(err)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			pods, _ := kube.CoreV1().Pods("checks").List(context.Background(), metav1.ListOptions{})
			if tt.busy != "" {
				if !res.Busy || res.Passed || !strings.Contains(res.Reason, tt.busy) || len(pods.Items) != 0 {
					t.Fatalf("result %+v, %d pods: want Busy (%s) and no Pod", res, len(pods.Items), tt.busy)
				}
				if n := testutil.ToFloat64(a.Metrics.RepairTries.WithLabelValues("reset", "busy")); n != 1 {
					t.Fatalf("busy tries metric %v", n)
				}
				return
			}
			if res.Busy || !res.Passed || res.BootID != "boot-1" {
				t.Fatalf("result %+v: want the step run, with the node's boot ID", res)
			}
			if n := testutil.ToFloat64(a.Metrics.RepairTries.WithLabelValues("reset", "passed")); n != 1 {
				t.Fatalf("passed tries metric %v", n)
			}
		})
	}
}

// A reset attempt that fails on a transient API error leaves its running Pod: the retry adopts it
// rather than starting a second reset of the same try under one permit (#52, defect 4). The last
// attempt cleans up, as every attempt of a workflow that does not say how many it gives does.
func TestARetriedResetAdoptsItsRunningPod(t *testing.T) {
	for _, tt := range []struct {
		name     string
		attempts int32
		keep     bool
	}{
		{"another attempt follows", 3, true},
		{"the last attempt", 1, false},
		{"attempts not said", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, a, kube := activityEnv(t, gpuSlice(), rebootNode("node-1", "boot-1", true))
			a.CheckPoll = 50 * time.Millisecond
			in := checkIn(decide.ActRepair)
			in.Idle, in.Step, in.Attempts = []device.ID{gpu3}, "reset", tt.attempts
			name := CheckName(decide.ActRepair, gpu3)
			var creates, gets atomic.Int32
			kube.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if _, err := kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "checks", name); apierrors.IsNotFound(err) {
					creates.Add(1) // a create of one that stands changes nothing
				}
				return false, nil, nil
			})
			kube.PrependReactor("get", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.(k8stesting.GetAction).GetName() == name && gets.Add(1) == 2 {
					return true, nil, apierrors.NewServerTimeout(corev1.Resource("pods"), "get", 1)
				}
				return false, nil, nil
			})
			if _, err := env.ExecuteActivity(a.RunCheck, in); err == nil {
				t.Fatal("the transient error did not fail the attempt")
			}
			_, err := kube.CoreV1().Pods("checks").Get(context.Background(), name, metav1.GetOptions{})
			if kept := err == nil; kept != tt.keep {
				t.Fatalf("reset Pod kept %t after a failed attempt, want %t (%v)", kept, tt.keep, err)
			}
			if !tt.keep {
				return
			}
			stop := kubelet(kube, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy)
			defer stop()
			v, err := env.ExecuteActivity(a.RunCheck, in)
			var res decide.StepResult
			if err == nil {
				err = v.Get(&res)
			}
			if err != nil || !res.Passed {
				t.Fatalf("the retry: %+v, %v", res, err)
			}
			if n := creates.Load(); n != 1 {
				t.Fatalf("%d reset Pods created for one try", n)
			}
			if _, err := kube.CoreV1().Pods("checks").Get(context.Background(), name, metav1.GetOptions{}); err == nil {
				t.Fatal("the reset Pod outlived its try")
			}
		})
	}
}

// holderPod is the running Pod that reserves claim c (as allocated names it).
func holderPod(c *resourcev1.ResourceClaim) *corev1.Pod {
	r := c.Status.ReservedFor[0]
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: r.Name, UID: r.UID}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// A claim still allocated the device but reserved by no Pod (its Pod just ended) is about to be
// deallocated: the step waits for it, instead of putting the try off for RepairRetry, a minute
// (#52: a holder deleted 20 s after the fence, the reset began about 60 s later).
func TestRepairWaitsForAClaimItsPodLeft(t *testing.T) {
	in := checkIn(decide.ActRepair)
	in.Idle, in.Step = []device.ID{gpu3}, "reset"
	left := allocated("team", "train", gpu3)
	left.Status.ReservedFor = nil
	res, _, _, err := runCheck(t, in, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy, func(cs *fake.Clientset) {
		if err := cs.Tracker().Add(left); err != nil {
			t.Fatal(err)
		}
		if err := cs.Tracker().Add(rebootNode("node-1", "boot-1", true)); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(300 * time.Millisecond) // the claim controller deallocates it
			c := left.DeepCopy()
			c.Status.Allocation = nil
			_, _ = cs.ResourceV1().ResourceClaims("team").UpdateStatus(context.Background(), c, metav1.UpdateOptions{})
		}()
	})
	if err != nil || res.Busy || !res.Passed {
		t.Fatalf("result %+v, %v", res, err)
	}
}

// A claim that still names a Pod that is gone (the claim controller has not caught up) is waited
// for too; one whose Pod runs is a holder at once.
func TestRepairTellsALivePodFromAGoneOne(t *testing.T) {
	_, a, kube := activityEnv(t)
	ctx := context.Background()
	c := allocated("team", "train", gpu3)
	if (checkPods{a}).inUse(ctx, *c) {
		t.Fatal("a claim whose Pod is gone is in use")
	}
	if err := kube.Tracker().Add(holderPod(c)); err != nil {
		t.Fatal(err)
	}
	if !(checkPods{a}).inUse(ctx, *c) {
		t.Fatal("a claim whose Pod runs is not in use")
	}
	done := holderPod(c)
	done.Status.Phase = corev1.PodSucceeded
	if _, err := kube.CoreV1().Pods("team").UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if (checkPods{a}).inUse(ctx, *c) {
		t.Fatal("a claim whose Pod ended is in use")
	}
	other := c.DeepCopy()
	other.Status.ReservedFor[0].Resource = "jobsets"
	if !(checkPods{a}).inUse(ctx, *other) {
		t.Fatal("a claim reserved by another kind of consumer is not in use")
	}
}

// A workflow that knows only its own form (one started before its unit was known) still waits
// for a claim on another form of the same GPU: the reset Pod of the unit's workflow holds the
// whole device, and the two never reset one GPU at once (#52).
func TestRepairOfAFormWaitsForItsSiblings(t *testing.T) {
	whole := device.ID{Driver: gpu3.Driver, Pool: gpu3.Pool, Device: "gpu-4"}
	in := checkIn(decide.ActRepair)
	in.Idle, in.Step = []device.ID{gpu3}, "reset"
	unitsReset := allocated("checks", CheckName(decide.ActRepair, whole), whole)
	res, _, kube, err := runCheck(t, in, corev1.PodSucceeded, corev1.ResourceHealthStatusHealthy, func(cs *fake.Clientset) {
		s, err := cs.ResourceV1().ResourceSlices().Get(context.Background(), "node-1-gpu", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-4-cs"}}
		}
		if _, err := cs.ResourceV1().ResourceSlices().Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, o := range []runtime.Object{unitsReset, holderPod(unitsReset), rebootNode("node-1", "boot-1", true)} {
			if err := cs.Tracker().Add(o); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	pods, _ := kube.CoreV1().Pods("checks").List(context.Background(), metav1.ListOptions{})
	if !res.Busy || !strings.Contains(res.Reason, "is still allocated "+whole.String()) || len(pods.Items) != 1 {
		t.Fatalf("result %+v, %d pods: want Busy behind the unit's reset, and no second reset Pod", res, len(pods.Items))
	}
}
