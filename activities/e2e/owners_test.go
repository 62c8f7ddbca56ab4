//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// One rule, two workflows that fence its device (#40, defect 4): a partition's own workflow P
// (an operator's manual quarantine, or one started while its slices were gone) and its GPU's
// unit workflow U. Whichever fenced first owns the rule; the other waits on it. Neither's release
// lifts the other's fence: the owner's release hands the rule to the waiter. Before, U took P's
// rule over silently (AlreadyExists, then update) and U's release deleted it while P still said
// Quarantined; the other way round P's release deleted U's fence of that form.
func TestOneOwnerPerRuleOnTheRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := &remediation.Activities{Kube: kube}
	unit := device.ID{Driver: sim.Driver, Pool: "owners-0", Device: "counters=gpu-0-counter-set"}
	members := []string{"gpu-0", "gpu-0-mig-1g10gb-19-0"}
	form := device.ID{Driver: unit.Driver, Pool: unit.Pool, Device: members[1]}
	pWF, uWF := form.WorkflowID(), unit.WorkflowID()
	manual := remediation.QuarantineInput{Device: form, Reason: "operator: flaky ECC", Actor: "alice", WorkflowID: pWF,
		Effect: resourcev1.DeviceTaintEffectNoExecute, ExpiresAt: time.Now().Add(time.Hour)}
	fence := remediation.QuarantineInput{Device: unit, Members: members, Reason: "XID 79", Actor: "devicewarden", WorkflowID: uWF,
		Effect: resourcev1.DeviceTaintEffectNoExecute, ExpiresAt: time.Now().Add(time.Hour)}
	rule := func() *resourcev1.DeviceTaintRule {
		t.Helper()
		r, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, form.TaintRuleName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// P fences first; U's fence of the unit waits on P's rule and leaves its reason alone.
	if _, err := a.Quarantine(ctx, manual); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Quarantine(ctx, fence); err != nil {
		t.Fatal(err)
	}
	r := rule()
	if r.Annotations[kubeobj.AnnotationWorkflow] != pWF || r.Annotations[kubeobj.AnnotationReason] != manual.Reason ||
		r.Annotations[kubeobj.AnnotationWaiting] != uWF {
		t.Fatalf("after U's fence the rule is %v: P's rule was taken over", r.Annotations)
	}
	// A refresh by U leaves P's taint alone.
	probation := fence
	probation.Key = "devicewarden.io/probation"
	if _, err := a.RefreshRule(ctx, probation); err != nil {
		t.Fatal(err)
	}
	if r := rule(); r.Spec.Taint.Key != "devicewarden.io/quarantine" {
		t.Fatalf("U's refresh changed P's taint to %s", r.Spec.Taint.Key)
	}
	// U's release keeps P's fence, and U stops waiting on it.
	if err := a.ReleaseRule(ctx, remediation.ReleaseInput{Device: unit, Members: members, WorkflowID: uWF}); err != nil {
		t.Fatal(err)
	}
	r = rule()
	if r == nil {
		t.Fatal("U's release deleted P's manual quarantine")
	}
	if r.Annotations[kubeobj.AnnotationWorkflow] != pWF || r.Annotations[kubeobj.AnnotationWaiting] != "" {
		t.Fatalf("after U's release: %v", r.Annotations)
	}
	gpu := device.ID{Driver: unit.Driver, Pool: unit.Pool, Device: members[0]}
	if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, gpu.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("U's own rule of gpu-0 is still there: %v", err)
	}

	// The other way round: U fences, P's workflow starts later (slices gone) and waits on U's
	// rule; P's release leaves U's fence; U's release hands the rule to nobody and deletes it.
	if err := a.ReleaseRule(ctx, remediation.ReleaseInput{Device: form, WorkflowID: pWF}); err != nil {
		t.Fatal(err)
	}
	if rule() != nil {
		t.Fatal("P's release left its own rule")
	}
	if _, err := a.Quarantine(ctx, fence); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Quarantine(ctx, manual); err != nil || res.Owner != uWF {
		t.Fatalf("P's quarantine over U's rule: %+v %v", res, err)
	}
	if err := a.ReleaseRule(ctx, remediation.ReleaseInput{Device: form, WorkflowID: pWF}); err != nil {
		t.Fatal(err)
	}
	if r := rule(); r == nil || r.Annotations[kubeobj.AnnotationWorkflow] != uWF {
		t.Fatalf("P's release lifted U's fence of %s: %v", form, r)
	}
	// Both fence again, P waiting; U's release hands the rule to P, which still says Quarantined.
	if _, err := a.Quarantine(ctx, manual); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseRule(ctx, remediation.ReleaseInput{Device: unit, Members: members, WorkflowID: uWF}); err != nil {
		t.Fatal(err)
	}
	r = rule()
	if r == nil || r.Annotations[kubeobj.AnnotationWorkflow] != pWF || r.Annotations[kubeobj.AnnotationHandedOver] == "" {
		t.Fatalf("U's release did not hand the rule to P: %v", r)
	}
	if err := a.ReleaseRule(ctx, remediation.ReleaseInput{Device: form, WorkflowID: pWF}); err != nil {
		t.Fatal(err)
	}
	if rule() != nil {
		t.Fatal("the last owner's release left the rule")
	}
}
