//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// runningPod creates a workload and waits until kwok reports its container running.
func runningPod(t *testing.T, ctx context.Context, kube kubernetes.Interface, w sim.Workload) *corev1.Pod {
	t.Helper()
	if err := sim.EnsureNamespace(ctx, kube, w.Namespace); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, kube); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	eventually(t, 60*time.Second, "pod "+w.Name+" running", func() error {
		p, err := kube.CoreV1().Pods(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("phase %s, %d container statuses", p.Status.Phase, len(p.Status.ContainerStatuses))
		}
		pod = p
		return nil
	})
	return pod
}

func claimAllocated(ctx context.Context, kube kubernetes.Interface, ns, name string) (*resourcev1.ResourceClaim, error) {
	c, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if c.Status.Allocation == nil {
		return c, fmt.Errorf("claim %s/%s not allocated", ns, name)
	}
	return c, nil
}

func workflowRuns(t *testing.T, ctx context.Context, id string) int {
	t.Helper()
	resp, err := shared.temporal.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Namespace: "default", Query: fmt.Sprintf("WorkflowId = %q", id),
	})
	if err != nil {
		t.Fatalf("count workflow executions: %v", err)
	}
	return int(resp.GetCount())
}

// noWorkflow checks with the server that the device has no workflow at all.
func noWorkflow(t *testing.T, ctx context.Context, id device.ID) {
	t.Helper()
	_, err := shared.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), "")
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("%s: describe answered %v, want NotFound: a workflow was started", id, err)
	}
}

func queryState(ctx context.Context, id string) (decide.DeviceState, error) {
	var st decide.DeviceState
	return st, queryInto(ctx, shared.temporal, id, &st)
}

// TestUnhealthyDeviceIsQuarantinedAndSkippedByScheduler is the core loop end to end: a kubelet-style
// Unhealthy report becomes one DeviceTaintRule, and the real scheduler stops allocating that device.
func TestUnhealthyDeviceIsQuarantinedAndSkippedByScheduler(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube := shared.kube
	nodes, err := sim.CreateNodes(ctx, kube, "q", 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	ns, node := "quarantine", nodes[0]
	bad := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-0"}
	runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "trainer", Node: node, Index: ptr.To(0), Template: true})

	// Healthy reports cost Temporal nothing: once the watcher has seen the update (a Pod reporting
	// only Healthy is dropped as it arrives), the device has no workflow, asked of the server
	// itself rather than of its lagging visibility index.
	seen := testutil.ToFloat64(shared.metrics.WatcherEvents.WithLabelValues("pod", "update"))
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusHealthy, ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the watcher saw the Healthy report", func() error {
		if n := testutil.ToFloat64(shared.metrics.WatcherEvents.WithLabelValues("pod", "update")); n <= seen {
			return fmt.Errorf("pod updates seen %v", n)
		}
		return nil
	})
	noWorkflow(t, ctx, bad)

	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79: fell off the bus"); err != nil {
		t.Fatal(err)
	}
	var rule *resourcev1.DeviceTaintRule
	eventually(t, 30*time.Second, "DeviceTaintRule for "+bad.String(), func() error {
		rule, err = kube.ResourceV1().DeviceTaintRules().Get(ctx, bad.TaintRuleName(), metav1.GetOptions{})
		return err
	})
	sel := rule.Spec.DeviceSelector
	if sel == nil || ptr.Deref(sel.Driver, "") != bad.Driver || ptr.Deref(sel.Pool, "") != bad.Pool || ptr.Deref(sel.Device, "") != bad.Device {
		t.Fatalf("rule selects %+v, want %s", sel, bad)
	}
	if rule.Spec.Taint.Key != kubeobj.TaintKey || rule.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNoSchedule {
		t.Fatalf("taint = %+v", rule.Spec.Taint)
	}
	if rule.Annotations[kubeobj.AnnotationWorkflow] != bad.WorkflowID() || rule.Annotations[kubeobj.AnnotationActor] != api.Actor ||
		rule.Annotations[kubeobj.AnnotationReason] == "" || rule.Annotations[kubeobj.AnnotationExpiresAt] == "" {
		t.Fatalf("rule annotations = %v", rule.Annotations)
	}
	eventually(t, 10*time.Second, "workflow state Quarantined", func() error {
		st, err := queryState(ctx, bad.WorkflowID())
		if err != nil {
			return err
		}
		if st.State != decide.Quarantined || st.Quarantine == nil || len(st.Reporters) != 1 {
			return fmt.Errorf("state %+v", st)
		}
		return nil
	})
	// What the CLI and the fleet page read: the view, with the line a person reads.
	v, err := api.QueryDevice(ctx, shared.temporal, bad.WorkflowID(), "")
	if err != nil || v.State != decide.Quarantined || v.Quarantine == nil || v.Quarantine.RuleName != rule.Name || len(v.Reporters) != 1 ||
		!strings.HasPrefix(v.Summary, "Quarantined since ") || v.Next == "" || v.Policy.Name == "" {
		t.Fatalf("view %+v, %v", v, err)
	}

	t.Run("a repeated event makes no second run and no second rule", func(t *testing.T) {
		// The same report again through the cluster, then the same observation sent straight to
		// Temporal (as a restarted watcher would), once with the same version and once newer.
		if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79: fell off the bus"); err != nil {
			t.Fatal(err)
		}
		st, err := queryState(ctx, bad.WorkflowID())
		if err != nil {
			t.Fatal(err)
		}
		dup := api.Observation{Device: bad, Node: node, Health: device.Unhealthy, Message: st.Message, StatusVersion: st.StatusVersion, ObservedAt: time.Now()}
		newer := dup
		newer.StatusVersion = fmt.Sprint(1 << 40)
		for _, o := range []api.Observation{dup, newer} {
			if err := shared.temporal.SignalWorkflow(ctx, bad.WorkflowID(), "", api.SignalObservation, o); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 10*time.Second, "duplicate counted", func() error {
			st, err := queryState(ctx, bad.WorkflowID())
			if err != nil {
				return err
			}
			if st.Ignored < 1 || st.StatusVersion != newer.StatusVersion {
				return fmt.Errorf("ignored=%d version=%s", st.Ignored, st.StatusVersion)
			}
			return nil
		})
		eventually(t, 10*time.Second, "visibility lists the run", func() error {
			if n := workflowRuns(t, ctx, bad.WorkflowID()); n != 1 {
				return fmt.Errorf("%d runs", n)
			}
			return nil
		})
		rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{
			LabelSelector: fmt.Sprintf("%s=%s,%s=%s", kubeobj.LabelPool, bad.Pool, kubeobj.LabelDevice, bad.Device)})
		if err != nil {
			t.Fatal(err)
		}
		if len(rules.Items) != 1 {
			t.Fatalf("%d rules for one device", len(rules.Items))
		}
		// The duplicate report wrote nothing: the rule was created once, by the apiserver's audit log.
		if n := createdTimes(t, shared, bad.TaintRuleName()); n != 1 {
			t.Fatalf("rule %s created %d times", bad.TaintRuleName(), n)
		}
		st, err = queryState(ctx, bad.WorkflowID())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Transitions) != 1 {
			t.Fatalf("transitions = %+v", st.Transitions)
		}
		recordHistory(t, ctx, shared.temporal, bad.WorkflowID(), "device_quarantine.json")
	})

	t.Run("the scheduler no longer allocates the quarantined device", func(t *testing.T) {
		// Free the device: delete the pod; its generated claim goes with it.
		if err := kube.CoreV1().Pods(ns).Delete(ctx, "trainer", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "trainer pod and its claim gone", func() error {
			if _, err := kube.CoreV1().Pods(ns).Get(ctx, "trainer", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod still there (%v)", err)
			}
			claims, err := kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(claims.Items) != 0 {
				return fmt.Errorf("%d claims left", len(claims.Items))
			}
			return nil
		})
		// One claim can only use the quarantined device, the other only its healthy neighbour.
		if _, err := (sim.Workload{Namespace: ns, Name: "wants-bad", Node: node, Index: ptr.To(0)}).Create(ctx, kube); err != nil {
			t.Fatal(err)
		}
		runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "wants-good", Node: node, Index: ptr.To(1)})
		if _, err := claimAllocated(ctx, kube, ns, "wants-good"); err != nil {
			t.Fatal(err)
		}
		// The scheduler has had the bad claim's pod in its queue at least as long as the good one;
		// give it more time and check it stays Pending.
		time.Sleep(3 * time.Second)
		if c, err := claimAllocated(ctx, kube, ns, "wants-bad"); err == nil {
			t.Fatalf("quarantined device was allocated: %+v", c.Status.Allocation.Devices.Results)
		}
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, "wants-bad", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
			t.Fatalf("pod on the quarantined device scheduled to %q (%s)", pod.Spec.NodeName, pod.Status.Phase)
		}
		// Control: removing the taint is what makes the device allocatable again.
		if err := kube.ResourceV1().DeviceTaintRules().Delete(ctx, bad.TaintRuleName(), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "claim allocated once the rule is gone", func() error {
			_, err := claimAllocated(ctx, kube, ns, "wants-bad")
			return err
		})
	})
}
