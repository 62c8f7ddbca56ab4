//go:build e2e

package e2e

import (
	"github.com/devicewarden/devicewarden/api"

	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A rollback's block made earlier for another class list (a plan edited between two rollbacks of
// one phase) is brought up to date, and every class is proven refused, not only the first (#40,
// check). Before, BlockNewClaims ignored AlreadyExists and proved only the first class: it
// returned with claims for the new class still admitted.
func TestBlockCoversEveryClassOnTheRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policy.DefaultProbeNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	a := &rollouts.Activities{Kube: kube}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment() // the proof heartbeats
	env.RegisterActivity(a)
	in := api.BlockInput{Rollout: "classes", Phase: "wide", Classes: []string{"gpu-a"}, Reason: "gate failed"}
	if _, err := env.ExecuteActivity(a.BlockNewClaims, in); err != nil {
		t.Fatal(err)
	}
	in.Classes = []string{"gpu-a", "gpu-b"}
	if _, err := env.ExecuteActivity(a.BlockNewClaims, in); err != nil {
		t.Fatal(err)
	}
	for _, class := range in.Classes {
		claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "block-test-", Namespace: ns.Name},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "r",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}}}}}
		_, err := kube.ResourceV1().ResourceClaims(ns.Name).Create(ctx, claim, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), kubeobj.BlockName("classes", "wide")) {
			t.Errorf("a claim for %s after the block: %v", class, err)
		}
	}
	if _, err := env.ExecuteActivity(a.UnblockNewClaims, in); err != nil {
		t.Fatal(err)
	}
}
