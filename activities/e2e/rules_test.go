//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/poll"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// TestRuleActivitiesOnTheRealAPIServer: dry run read per call, expiry written by a refresh, a
// rule being deleted is not in force, and label values stay valid for names the API allows.
func TestRuleActivitiesOnTheRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A legal pool name with a slash whose 63-character cut ends in '-' (the label needs mending).
	id := device.ID{Driver: sim.Driver, Pool: "rack-1/" + strings.Repeat("b", 55) + "-c", Device: "gpu-dry"}
	dry := &remediation.Activities{Kube: kube, DryRun: true}
	in := remediation.QuarantineInput{Device: id, Reason: "test", Actor: decide.Actor, Effect: resourcev1.DeviceTaintEffectNoSchedule,
		ExpiresAt: time.Now().Add(time.Hour)}
	res, err := dry.Quarantine(ctx, in)
	if err != nil {
		t.Fatalf("a pool name with slashes and a 63-character cut: %v", err)
	}
	if res.Effect != string(resourcev1.DeviceTaintEffectNone) {
		t.Fatalf("dry run created effect %s", res.Effect)
	}
	real := &remediation.Activities{Kube: kube}
	info, err := real.InspectRule(ctx, remediation.InspectInput{Device: id, Effect: string(resourcev1.DeviceTaintEffectNoSchedule)})
	if err != nil {
		t.Fatal(err)
	}
	if !info.InForce() || info.Effect != "None" || info.WantEffect != "NoSchedule" {
		t.Fatalf("inspect after dry run: %+v", info)
	}
	later := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	in.ExpiresAt = later
	rr, err := real.RefreshRule(ctx, in)
	if err != nil || rr.Missing || rr.Effect != "NoSchedule" {
		t.Fatalf("refresh: %+v %v", rr, err)
	}
	r, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNoSchedule || r.Annotations[kubeobj.AnnotationExpiresAt] != later.Format(time.RFC3339) {
		t.Fatalf("rule after refresh: %s %v", r.Spec.Taint.Effect, r.Annotations)
	}
	// A finalizer keeps the deleted rule around: it is not in force, and a quarantine waits.
	setFinalizers(t, ctx, r.Name, "test.devicewarden.io/hold")
	if err := kube.ResourceV1().DeviceTaintRules().Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err = real.InspectRule(ctx, remediation.InspectInput{Device: id, Effect: "NoSchedule"})
	if err != nil || info.InForce() || !info.Deleting {
		t.Fatalf("inspect while deleting: %+v %v", info, err)
	}
	if _, err := real.Quarantine(ctx, in); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("quarantine over a rule being deleted: %v", err)
	}
	if rr, err := real.RefreshRule(ctx, in); err != nil || !rr.Missing {
		t.Fatalf("refresh of a rule being deleted: %+v %v", rr, err)
	}
	setFinalizers(t, ctx, r.Name)
	poll.Until(t, 10*time.Second, "rule gone", func() error {
		if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, r.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	if res, err := real.Quarantine(ctx, in); err != nil || !res.Created {
		t.Fatalf("quarantine once the old rule is gone: %+v %v", res, err)
	}
	if err := real.ReleaseRule(ctx, remediation.ReleaseInput{Device: id}); err != nil {
		t.Fatal(err)
	}
}

func setFinalizers(t *testing.T, ctx context.Context, name string, finalizers ...string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		r, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Finalizers = finalizers
		_, err = kube.ResourceV1().DeviceTaintRules().Update(ctx, r, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
