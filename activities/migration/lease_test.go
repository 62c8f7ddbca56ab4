package migration

import (
	"context"
	"errors"
	"github.com/devicewarden/devicewarden/api"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

var trainJob = api.Workload{Kind: "Job", APIVersion: "batch/v1", Namespace: "team-a", Name: "train", UID: "uid-train"}

func leaseIn(holder string) LeaseInput {
	return LeaseInput{Workload: trainJob, Holder: holder, Duration: 15 * time.Second}
}

func takeLease(t *testing.T, env *testsuite.TestActivityEnvironment, a *Activities, in LeaseInput) LeaseResult {
	t.Helper()
	v, err := env.ExecuteActivity(a.TakeMigrationLease, in)
	if err != nil {
		t.Fatal(err)
	}
	var res LeaseResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestMigrationLease(t *testing.T) {
	env, a, kube := activityEnv(t)
	a.OwnNamespace = "devicewarden"
	first, second := leaseIn("migrate/a/uid-train/1"), leaseIn("migrate/b/uid-train/1")
	if res := takeLease(t, env, a, first); !res.Held {
		t.Fatalf("first take: %+v", res)
	}
	l, err := kube.CoordinationV1().Leases("devicewarden").Get(context.Background(), MigrationLeaseName(trainJob), metav1.GetOptions{})
	if err != nil || *l.Spec.HolderIdentity != first.Holder || *l.Spec.LeaseDurationSeconds != 15 || l.Labels[kubeobj.LabelWorkloadName] != "train" {
		t.Fatalf("lease %+v %v", l, err)
	}
	if res := takeLease(t, env, a, second); res.Held || res.Holder != first.Holder {
		t.Fatalf("a second migration took a held lease: %+v", res)
	}
	if res := takeLease(t, env, a, first); !res.Held {
		t.Fatalf("the holder could not renew (a restarted worker resuming): %+v", res)
	}
	// Expired: the second may take it over.
	l, _ = kube.CoordinationV1().Leases("devicewarden").Get(context.Background(), MigrationLeaseName(trainJob), metav1.GetOptions{})
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-time.Minute)}
	if _, err := kube.CoordinationV1().Leases("devicewarden").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := takeLease(t, env, a, second); !res.Held {
		t.Fatalf("an expired lease was not taken over: %+v", res)
	}
	l, _ = kube.CoordinationV1().Leases("devicewarden").Get(context.Background(), MigrationLeaseName(trainJob), metav1.GetOptions{})
	if *l.Spec.HolderIdentity != second.Holder || ptr.Deref(l.Spec.LeaseTransitions, 0) != 1 {
		t.Fatalf("after take-over: %+v", l.Spec)
	}
	// Only the holder releases it.
	if _, err := env.ExecuteActivity(a.ReleaseMigrationLease, first); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoordinationV1().Leases("devicewarden").Get(context.Background(), MigrationLeaseName(trainJob), metav1.GetOptions{}); err != nil {
		t.Fatalf("a former holder released the lease: %v", err)
	}
	if _, err := env.ExecuteActivity(a.ReleaseMigrationLease, second); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoordinationV1().Leases("devicewarden").Get(context.Background(), MigrationLeaseName(trainJob), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the holder's release left the lease: %v", err)
	}
}

func TestHoldMigrationLeaseStopsWhenTaken(t *testing.T) {
	env, a, kube := activityEnv(t)
	in := leaseIn("migrate/a/uid-train/1")
	in.Duration = 300 * time.Millisecond
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: MigrationLeaseName(trainJob), Namespace: "default"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To(int32(60)), RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if _, err := kube.CoordinationV1().Leases("default").Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := env.ExecuteActivity(a.HoldMigrationLease, in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != ErrLeaseLost || !app.NonRetryable() {
		t.Fatalf("err %v, want a non-retryable %s", err, ErrLeaseLost)
	}
}
