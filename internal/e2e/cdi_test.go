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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/watcher"
)

// eightGPUPod runs a Pod whose one claim holds all 8 devices of a fresh node and returns them.
func eightGPUPod(t *testing.T, ctx context.Context, prefix, class string) []device.ID {
	t.Helper()
	nodes, err := sim.CreateNodes(ctx, shared.kube, prefix, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	runningPod(t, ctx, shared.kube, sim.Workload{Namespace: prefix, Name: "trainer", Node: nodes[0], Count: 8, Template: true, DeviceClass: class})
	var ids []device.ID
	for i := 0; i < 8; i++ {
		ids = append(ids, device.ID{Driver: sim.Driver, Pool: nodes[0], Device: fmt.Sprintf("gpu-%d", i)})
	}
	return ids
}

func ruleCount(t *testing.T, ctx context.Context, ids []device.ID) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		_, err := shared.kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{})
		switch {
		case err == nil:
			n++
		case !apierrors.IsNotFound(err):
			t.Fatal(err)
		}
	}
	return n
}

// TestEightGPUPodWithCDIIDs: one device of an 8-device claim reported Unhealthy under a CDI
// device ID. With the driver's style declared (the test policy declares claim-device, device and
// attribute:uuid) exactly that device is quarantined; in a style nothing ties to one device (opaque) the report is not dropped:
// Warning Events on the Pod and the claim name the 8 candidates and nothing is tainted; a policy
// that says quarantine-candidates quarantines them all.
func TestEightGPUPodWithCDIIDs(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("declared style: exactly the device", func(t *testing.T) {
		ids := eightGPUPod(t, ctx, "cdi-exact", "")
		if _, err := sim.SetHealthStyle(ctx, shared.kube, ids[5], corev1.ResourceHealthStatusUnhealthy, "XID 79", sim.CDIClaimDevice); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "rule for gpu-5", func() error {
			_, err := shared.kube.ResourceV1().DeviceTaintRules().Get(ctx, ids[5].TaintRuleName(), metav1.GetOptions{})
			return err
		})
		// A canonical ID needs no declaration; the device name and the uuid attribute are styles
		// the test policy declares too, as for a driver whose upgrade changes its naming.
		for _, c := range []struct {
			dev   int
			style sim.CDIStyle
		}{{2, sim.CDICanonical}, {6, sim.CDIDevice}, {7, sim.CDIUUID}} {
			if _, err := sim.SetHealthStyle(ctx, shared.kube, ids[c.dev], corev1.ResourceHealthStatusUnhealthy, "XID 48", c.style); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, fmt.Sprintf("rule for %s reported in style %s", ids[c.dev].Device, c.style), func() error {
				_, err := shared.kube.ResourceV1().DeviceTaintRules().Get(ctx, ids[c.dev].TaintRuleName(), metav1.GetOptions{})
				return err
			})
		}
		time.Sleep(time.Second)
		if n := ruleCount(t, ctx, ids); n != 4 {
			t.Fatalf("%d rules on the node, want exactly gpu-2, gpu-5, gpu-6 and gpu-7", n)
		}
	})

	t.Run("opaque IDs: an ambiguity record, nothing dropped, nothing guessed", func(t *testing.T) {
		ids := eightGPUPod(t, ctx, "cdi-opaque", "")
		before := testutil.ToFloat64(shared.metrics.AmbiguousReports.WithLabelValues(policy.AmbiguousAlert))
		if _, err := sim.SetHealthStyle(ctx, shared.kube, ids[3], corev1.ResourceHealthStatusUnhealthy, "XID 79", sim.CDIOpaque); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "Warning Events on the Pod and the claim", func() error {
			evs, err := shared.kube.CoreV1().Events("cdi-opaque").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			kinds := map[string]bool{}
			for _, e := range evs.Items {
				if e.Reason == watcher.EventAmbiguous && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "any of 8 devices") &&
					strings.Contains(e.Message, ids[7].String()) {
					kinds[e.InvolvedObject.Kind] = true
				}
			}
			if !kinds["Pod"] || !kinds["ResourceClaim"] {
				return fmt.Errorf("events on %v", kinds)
			}
			return nil
		})
		if got := testutil.ToFloat64(shared.metrics.AmbiguousReports.WithLabelValues(policy.AmbiguousAlert)); got <= before {
			t.Fatalf("ambiguous reports counted %v, before %v", got, before)
		}
		time.Sleep(time.Second)
		if n := ruleCount(t, ctx, ids); n != 0 {
			t.Fatalf("%d devices tainted on a guess", n)
		}
	})

	t.Run("policy quarantine-candidates: every candidate", func(t *testing.T) {
		if err := sim.EnsureClass(ctx, shared.kube, ambiguousClass); err != nil {
			t.Fatal(err)
		}
		ids := eightGPUPod(t, ctx, "cdi-all", ambiguousClass)
		if _, err := sim.SetHealthStyle(ctx, shared.kube, ids[0], corev1.ResourceHealthStatusUnhealthy, "XID 79", sim.CDIOpaque); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "all 8 quarantined", func() error {
			if n := ruleCount(t, ctx, ids); n != 8 {
				return fmt.Errorf("%d of 8 rules", n)
			}
			return nil
		})
		st := waitState(t, ctx, shared, ids[6], 10*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
		if !strings.Contains(st.Message, "ambiguous report, one of 8 devices") {
			t.Fatalf("message %q", st.Message)
		}
	})
}
