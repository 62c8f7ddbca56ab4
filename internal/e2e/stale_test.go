//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// TestStaleReportAfterReallocation: a Job-like Pod reports its device Unhealthy (quarantined,
// rightly) and terminates; the named claim it used is reallocated to the next Pod, on another
// device. The old Pod's status still shows Unhealthy for "claim:gpu": it must not quarantine the
// device the claim holds now.
func TestStaleReportAfterReallocation(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	nodes, err := sim.CreateNodes(ctx, kube, "stale", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	ns, node := "stale", nodes[0]
	if err := sim.EnsureNamespace(ctx, kube, ns); err != nil {
		t.Fatal(err)
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.Driver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: fmt.Sprintf("device.attributes[%q].node == %q", sim.Driver, node)}}}}}}}},
	}
	if _, err := kube.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false), NodeSelector: map[string]string{sim.LabelSimNode: "true"},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared")}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/step:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod("step-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var first device.ID
	eventually(t, time.Minute, "step-1 running on an allocated device", func() error {
		c, err := claimAllocated(ctx, kube, ns, "shared")
		if err != nil {
			return err
		}
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "step-1", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("step-1 not running (%v)", err)
		}
		r := c.Status.Allocation.Devices.Results[0]
		first = device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		return nil
	})
	target := sim.Target{Namespace: ns, Pod: "step-1", Container: "main", EntryName: "claim:gpu"}
	if err := sim.WriteHealth(ctx, kube, target, "k8s."+sim.Driver+"/gpu=step-1-device", corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the failed device quarantined", func() error {
		_, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, first.TaintRuleName(), metav1.GetOptions{})
		return err
	})
	// step-1 ends (kept, as Jobs keep their Pods); its status keeps the Unhealthy report.
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "step-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
		_, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod("step-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var second device.ID
	eventually(t, time.Minute, "the claim reallocated to step-2 on the other device", func() error {
		c, err := claimAllocated(ctx, kube, ns, "shared")
		if err != nil {
			return err
		}
		if len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].Name != "step-2" {
			return fmt.Errorf("reserved for %+v", c.Status.ReservedFor)
		}
		r := c.Status.Allocation.Devices.Results[0]
		second = device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		if second == first {
			return fmt.Errorf("reallocated the quarantined device")
		}
		return nil
	})
	// An absence: nothing the watcher does for a terminated Pod's old report can be awaited (it
	// reports nothing and counts nothing), so give it the time it takes to act on a report.
	time.Sleep(2 * time.Second)
	if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, second.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the device now serving step-2 was quarantined on step-1's old report (%v)", err)
	}
	noWorkflow(t, ctx, second)
}
