//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// TestDriverTaintInItsSlice: the driver taints one device in its own ResourceSlice (as drivers do
// for hardware errors), with no Pod status involved: exactly that device is quarantined, and when
// the driver takes the taint off, its word starts the recovery review.
func TestDriverTaintInItsSlice(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, err := sim.CreateNodes(ctx, shared.kube, "dtaint", 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	var ids []device.ID
	for i := 0; i < 8; i++ {
		ids = append(ids, device.ID{Driver: sim.Driver, Pool: nodes[0], Device: fmt.Sprintf("gpu-%d", i)})
	}
	setTaint := func(taints []resourcev1.DeviceTaint) {
		t.Helper()
		sl, err := shared.kube.ResourceV1().ResourceSlices().Get(ctx, nodes[0]+"-gpu.sim", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl.Spec.Devices[3].Taints = taints
		if _, err := shared.kube.ResourceV1().ResourceSlices().Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setTaint([]resourcev1.DeviceTaint{{Key: "gpu.sim.devicewarden.io/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoExecute}})
	settled(t, ctx, shared, ids[3], decide.Quarantined)
	st, err := stateOf(ctx, shared, ids[3])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Quarantine.Reason, "xid=79:NoExecute") {
		t.Fatalf("quarantine reason %q does not say what the driver said", st.Quarantine.Reason)
	}
	if n := ruleCount(t, ctx, ids); n != 1 {
		t.Fatalf("%d rules on the node, want only gpu-3's", n)
	}

	setTaint(nil)
	eventually(t, 30*time.Second, "the driver's word starts the review", func() error {
		st, err := stateOf(ctx, shared, ids[3])
		if err != nil {
			return err
		}
		if st.Review == nil || !strings.Contains(st.Review.Trigger, string(decide.SourceSlice)) {
			return fmt.Errorf("state %s, review %+v", st.State, st.Review)
		}
		return nil
	})
	// No claim named a DeviceClass for this device: the probe runs through the driver's check class.
	eventually(t, 45*time.Second, "the probe passed on the device", func() error {
		st, err := stateOf(ctx, shared, ids[3])
		if err != nil {
			return err
		}
		if st.LastProbe == nil || !st.LastProbe.Passed {
			return fmt.Errorf("state %s, last probe %+v", st.State, st.LastProbe)
		}
		return nil
	})
}
