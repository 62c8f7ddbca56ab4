package remediation

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// A reset of gpu-0 that failed reached gpu-1..3 of its baseboard. gpu-2 has a quarantine of its
// own already: it is not reported, and its domain fence goes. gpu-1 and gpu-3 are reported
// Unhealthy with the reset as the cause; gpu-1's workflow quarantines it, and its domain fence
// goes once its own fence stands; gpu-3's never comes, and it keeps its domain fence.
func TestAFailedResetQuarantinesTheDevicesItReached(t *testing.T) {
	bad := gpu("node-1", 0)
	in := CheckInput{Device: bad, Domain: "attribute:baseboard", WorkflowID: bad.WorkflowID(), Step: "reset", TryAt: time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)}
	peers := domainPeers([]resourcev1.ResourceSlice{boards("node-1")}, bad, in.Domain)
	own := existingRule(QuarantineInput{Device: gpu("node-1", 2), Reason: "its own fault", WorkflowID: gpu("node-1", 2).WorkflowID(), Effect: resourcev1.DeviceTaintEffectNoSchedule})
	env, a, kube := activityEnv(t, own)
	a.CheckPoll, a.PeerWait = 20*time.Millisecond, 500*time.Millisecond
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{reportResource: "DeviceHealthReportList"})
	a.Objects = dyn
	var reported []string
	dyn.PrependReactor("create", healthreport.Resource, func(action k8stesting.Action) (bool, runtime.Object, error) {
		u := action.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		r, err := healthreport.FromObject(u.Object)
		if err != nil || r.Spec.Check() != nil || r.Spec.Health != "Unhealthy" || r.Spec.Source != healthreport.OwnSource || r.Spec.Cause.Code != healthreport.CodeResetFailed ||
			!strings.Contains(r.Spec.Message, "the reset of "+bad.String()) || !strings.Contains(r.Spec.Message, "exit code 1") {
			t.Errorf("report %+v (%v)", r, err)
		}
		id := device.ID{Driver: r.Spec.Device.Driver, Pool: r.Spec.Device.Pool, Device: r.Spec.Device.Name}
		reported = append(reported, id.Device)
		if id.Device == "gpu-1" {
			// gpu-1's workflow takes the report and fences it.
			rule := existingRule(QuarantineInput{Device: id, Reason: r.Spec.Message, WorkflowID: id.WorkflowID(), Effect: resourcev1.DeviceTaintEffectNoSchedule})
			if _, err := kube.ResourceV1().DeviceTaintRules().Create(context.Background(), rule, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		}
		return false, nil, nil
	})
	if err := (domains{a}).fenceDomain(context.Background(), in, "node-1", peers); err != nil {
		t.Fatal(err)
	}
	env.RegisterActivityWithOptions(func(ctx context.Context) ([]device.ID, error) {
		return (domains{a}).resetFailedPeers(ctx, in, "node-1", peers, decide.StepResult{Reason: "exit code 1"}), nil
	}, activity.RegisterOptions{Name: "FailedPeers"})
	v, err := env.ExecuteActivity("FailedPeers")
	var left []device.ID
	if err == nil {
		err = v.Get(&left)
	}
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(reported); !slices.Equal(reported, []string{"gpu-1", "gpu-3"}) {
		t.Errorf("reported %v", reported)
	}
	if !slices.Equal(left, []device.ID{gpu("node-1", 3)}) {
		t.Errorf("left %v", left)
	}
	if f := domainFences(t, a); !slices.Equal(f, []string{"gpu-3"}) {
		t.Errorf("domain fences %v", f)
	}
	// The same try's attempt taken again writes no second report.
	list, err := dyn.Resource(reportResource).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("reports %v %v", list, err)
	}
	if err := (domains{a}).reportPeer(context.Background(), in, gpu("node-1", 3), decide.StepResult{Reason: "exit code 1"}); err != nil {
		t.Fatalf("again: %v", err)
	}
	if list, _ := dyn.Resource(reportResource).List(context.Background(), metav1.ListOptions{}); len(list.Items) != 2 {
		t.Fatalf("reports after the attempt again: %d", len(list.Items))
	}
	if got := list.Items[0].GetAnnotations()[kubeobj.AnnotationWorkflow]; got != in.WorkflowID {
		t.Errorf("report's workflow %q", got)
	}
}
