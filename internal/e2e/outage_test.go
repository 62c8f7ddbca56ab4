//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// TestNodeOutage: when a node stops heartbeating and the node lifecycle controller says its Ready
// is Unknown, the devices DeviceWarden follows there become Suspect together with the outage as
// the reason; its other devices get no workflow each.
func TestNodeOutage(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := &stack{kube: shared.kube, temporal: shared.temporal}
	ids := devicePods(t, ctx, s.kube, "outage", 2)
	followed, other := ids[0], ids[1]
	node := followed.Pool

	// Give one device a workflow: an Unknown blip that recovers.
	setHealth(t, ctx, s.kube, ids[:1], corev1.ResourceHealthStatusUnknown)
	eventually(t, 30*time.Second, "followed device suspect", func() error {
		if st, err := stateOf(ctx, s, followed); err != nil || st.State != decide.Suspect {
			return fmt.Errorf("%v %s", err, st.State)
		}
		return nil
	})
	setHealth(t, ctx, s.kube, ids[:1], corev1.ResourceHealthStatusHealthy)
	eventually(t, 30*time.Second, "followed device healthy again", func() error {
		if st, err := stateOf(ctx, s, followed); err != nil || st.State != decide.Healthy {
			return fmt.Errorf("%v %s", err, st.State)
		}
		return nil
	})

	// The node stops heartbeating: kwok no longer manages it. The node lifecycle controller says
	// so after its grace period (50 s); the test writes its verdict now, as the controller does.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, localcluster.KwokNodeAnnotation)
	if _, err := s.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Ready Unknown", func() error {
		n, err := s.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				n.Status.Conditions[i] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
					Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.",
					LastHeartbeatTime: c.LastHeartbeatTime, LastTransitionTime: metav1.Now()}
			}
		}
		_, err = s.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})

	eventually(t, 30*time.Second, "followed device suspect because of the outage", func() error {
		st, err := stateOf(ctx, s, followed)
		if err != nil {
			return err
		}
		if st.State != decide.Suspect || !strings.Contains(st.Message, "outage") {
			return fmt.Errorf("state %s message %q", st.State, st.Message)
		}
		return nil
	})
	if n, err := runs(ctx, s, other); err != nil || n != 0 {
		t.Fatalf("a healthy device on the dead node got %d workflows (%v)", n, err)
	}
	if n := testutil.ToFloat64(shared.metrics.NodeOutages); n < 1 {
		t.Fatalf("node outages metric = %v", n)
	}
}

// TestDeviceGoneFromSlice: a device that disappears from its pool's ResourceSlice while allocated
// becomes Suspect; when the driver publishes it again the Suspect state clears.
func TestDeviceGoneFromSlice(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &stack{kube: shared.kube, temporal: shared.temporal}
	ids := devicePods(t, ctx, s.kube, "vanish", 1)
	id := ids[0]
	sliceName := id.Pool + "-gpu.sim"
	edit := func(keep func(name string) bool, all []resourcev1.Device) {
		t.Helper()
		eventually(t, 10*time.Second, "slice updated", func() error {
			sl, err := s.kube.ResourceV1().ResourceSlices().Get(ctx, sliceName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var devs []resourcev1.Device
			for _, d := range all {
				if keep(d.Name) {
					devs = append(devs, d)
				}
			}
			sl.Spec.Devices = devs
			_, err = s.kube.ResourceV1().ResourceSlices().Update(ctx, sl, metav1.UpdateOptions{})
			return err
		})
	}
	orig, err := s.kube.ResourceV1().ResourceSlices().Get(ctx, sliceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edit(func(n string) bool { return n != id.Device }, orig.Spec.Devices)
	eventually(t, 30*time.Second, "device suspect after leaving its slice", func() error {
		st, err := stateOf(ctx, s, id)
		if err != nil {
			return err
		}
		if st.State != decide.Suspect || !strings.Contains(st.Message, "disappeared from its ResourceSlice") {
			return fmt.Errorf("state %s message %q", st.State, st.Message)
		}
		return nil
	})
	edit(func(string) bool { return true }, orig.Spec.Devices)
	eventually(t, 30*time.Second, "device healthy once published again", func() error {
		st, err := stateOf(ctx, s, id)
		if err != nil {
			return err
		}
		if st.State != decide.Healthy {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
}

// TestDevicePluginDevice: a device-plugin health report (extended resource name + device ID on the
// node) starts the device's workflow and quarantines it as a record; no DeviceTaintRule can exist.
func TestDevicePluginDevice(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &stack{kube: shared.kube, temporal: shared.temporal}
	nodes, err := sim.CreateNodes(ctx, s.kube, "dp", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "deviceplugin"
	if err := sim.EnsureNamespace(ctx, s.kube, ns); err != nil {
		t.Fatal(err)
	}
	runningPod(t, ctx, s.kube, sim.Workload{Namespace: ns, Name: "fpga-job", Node: nodes[0], DevicePlugin: true})
	if err := sim.SetPluginHealth(ctx, s.kube, ns, "fpga-job", "fpga-2", corev1.ResourceHealthStatusUnhealthy, "PCIe link down"); err != nil {
		t.Fatal(err)
	}
	id := device.ID{Driver: sim.PluginResource, Pool: nodes[0], Device: "fpga-2"}
	eventually(t, 30*time.Second, "device-plugin device quarantined", func() error {
		st, err := stateOf(ctx, s, id)
		if err != nil {
			return err
		}
		if st.State != decide.Quarantined || st.Quarantine == nil || st.Quarantine.RuleName != "" || len(st.Reporters) != 1 {
			return fmt.Errorf("state %+v", st)
		}
		return nil
	})
}

// TestClaimDeviceCondition: a driver's Ready=False condition in the claim's status.devices[] makes
// the device Suspect; when it turns True the device is Healthy again.
func TestClaimDeviceCondition(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &stack{kube: shared.kube, temporal: shared.temporal}
	ids := devicePods(t, ctx, s.kube, "cond", 1)
	id := ids[0]
	setCond := func(status metav1.ConditionStatus) {
		t.Helper()
		eventually(t, 10*time.Second, "claim status written", func() error {
			c, err := s.kube.ResourceV1().ResourceClaims("cond").Get(ctx, "job-0", metav1.GetOptions{})
			if err != nil {
				return err
			}
			c.Status.Devices = []resourcev1.AllocatedDeviceStatus{{Driver: id.Driver, Pool: id.Pool, Device: id.Device,
				Conditions: []metav1.Condition{{Type: "Ready", Status: status, Reason: "LinkTraining", Message: "link not trained", LastTransitionTime: metav1.Now()}}}}
			_, err = s.kube.ResourceV1().ResourceClaims("cond").UpdateStatus(ctx, c, metav1.UpdateOptions{})
			return err
		})
	}
	setCond(metav1.ConditionFalse)
	eventually(t, 30*time.Second, "device suspect from its claim condition", func() error {
		st, err := stateOf(ctx, s, id)
		if err != nil {
			return err
		}
		if st.State != decide.Suspect || !strings.Contains(st.Message, "Ready=False") {
			return fmt.Errorf("state %s message %q", st.State, st.Message)
		}
		return nil
	})
	setCond(metav1.ConditionTrue)
	eventually(t, 30*time.Second, "device healthy once the condition clears", func() error {
		st, err := stateOf(ctx, s, id)
		if err != nil {
			return err
		}
		if st.State != decide.Healthy {
			return fmt.Errorf("state %s message %q", st.State, st.Message)
		}
		return nil
	})
}

// TestSliceRecreatedUnderANewName: drivers re-create their slices with generated names (a driver
// restart); a device that vanished while allocated is back when any slice of its pool publishes it.
// And a device that vanished with its node (a deleted spot node) stops being reported Unknown once
// its claim lets it go.
func TestSliceRecreatedUnderANewName(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &stack{kube: shared.kube, temporal: shared.temporal}
	ids := devicePods(t, ctx, s.kube, "rename", 1)
	id := ids[0]
	orig, err := s.kube.ResourceV1().ResourceSlices().Get(ctx, id.Pool+"-gpu.sim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.kube.ResourceV1().ResourceSlices().Delete(ctx, orig.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, s, id, 30*time.Second, func(st decide.DeviceState) bool {
		return st.State == decide.Suspect && strings.Contains(st.Message, "disappeared from its ResourceSlice")
	})
	again := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: id.Pool + "-gpu.sim-"}, Spec: orig.Spec}
	again.Spec.Pool.Generation++
	if _, err := s.kube.ResourceV1().ResourceSlices().Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, s, id, 30*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Healthy })

	// The node goes away with its slice and its Pods; the claim is deleted with the Pod.
	gone := devicePods(t, ctx, s.kube, "spot", 1)[0]
	if err := s.kube.ResourceV1().ResourceSlices().Delete(ctx, gone.Pool+"-gpu.sim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, s, gone, 30*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Suspect })
	if err := s.kube.CoreV1().Pods("spot").Delete(ctx, "job-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := s.kube.ResourceV1().ResourceClaims("spot").Delete(ctx, "job-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, s, gone, 60*time.Second, func(st decide.DeviceState) bool {
		return st.State == decide.Healthy && len(st.Reporters) == 0
	})
}
