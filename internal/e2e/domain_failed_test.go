//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// A reset that fails reaches its whole domain: GPU 0 of an 8-GPU baseboard has a fault no reset
// clears, and its ladder's reset fails. Each of the other 7 GPUs is then reported Unhealthy by
// DeviceWarden's own DeviceHealthReport with the reset as the cause, and quarantined by its own
// workflow; the reset's domain fences go once those quarantines stand.
func TestAFailedResetQuarantinesItsDomain(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, domainClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateBaseboardNodes(ctx, kube, "dom-fail", 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	bad := faultGPU0(t, ctx, "dom-fail", node, sim.FaultPermanent)
	st := waitState(t, ctx, shared, bad, time.Minute, func(st decide.DeviceState) bool {
		return st.Quarantine != nil && st.Quarantine.Ladder != nil && len(st.Quarantine.Ladder.Tries) > 0 && st.Quarantine.Ladder.Tries[0].Result != nil
	})
	try := st.Quarantine.Ladder.Tries[0].Result
	if try.Passed || try.NotRun || !strings.Contains(try.Reason, "exit code 1") {
		t.Fatalf("the reset of %s: %+v", bad, try)
	}
	for i := 1; i < 8; i++ {
		peer := device.ID{Driver: sim.Driver, Pool: node, Device: fmt.Sprintf("gpu-%d", i)}
		st := waitState(t, ctx, shared, peer, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
		if !strings.Contains(st.Quarantine.Reason, healthreport.CodeResetFailed) || !strings.Contains(st.Quarantine.Reason, "the reset of "+bad.String()) {
			t.Errorf("%s quarantined for %q", peer, st.Quarantine.Reason)
		}
	}
	// The reset's domain fences went once each device's own quarantine fenced it.
	eventually(t, time.Minute, "the domain fences of "+node+" lifted", func() error {
		rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(node)})
		if err != nil {
			return err
		}
		for _, r := range rules.Items {
			if r.Spec.Taint.Key == kubeobj.TaintDomainReset {
				return fmt.Errorf("domain fence %s on %s stands", r.Name, *r.Spec.DeviceSelector.Device)
			}
		}
		return nil
	})
	reports, err := app.ReportsClient(shared.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	list, err := reports.List(ctx, metav1.ListOptions{LabelSelector: kubeobj.LabelPool + "=" + kubeobj.LabelValue(node)})
	if err != nil {
		t.Fatal(err)
	}
	delivered := 0
	for _, u := range list.Items {
		r, err := healthreport.FromObject(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		if r.Spec.Source == healthreport.OwnSource && r.Status.Outcome == healthreport.Delivered {
			delivered++
		}
	}
	if delivered != 7 {
		t.Fatalf("%d of DeviceWarden's reports delivered, want 7 (%d reports)", delivered, len(list.Items))
	}
	t.Logf("the failed reset of %s quarantined its 7 peers: %s", bad, try.Reason)
}
