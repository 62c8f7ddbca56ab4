package migration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// ErrLeaseLost is the non-retryable error type of a migration whose Lease another holder took.
const ErrLeaseLost = "MigrationLeaseLost"

// LeaseInput names a workload's migration Lease and who asks for it (a migration workflow's ID).
type LeaseInput struct {
	Workload api.Workload  `json:"workload"`
	Holder   string        `json:"holder"`
	Duration time.Duration `json:"duration"`
}

// LeaseResult says whether the caller holds the Lease, and who does.
type LeaseResult struct {
	Held   bool   `json:"held"`
	Holder string `json:"holder"`
}

// MigrationLeaseName is the Lease of one workload (by UID, so a recreated workload of the same name
// has its own), kept in DeviceWarden's namespace: tenants' namespaces stay untouched and the
// permission is a Role there, not every Lease in the cluster.
func MigrationLeaseName(w api.Workload) string {
	sum := sha256.Sum256([]byte(w.UID))
	return "devicewarden-migrate-" + hex.EncodeToString(sum[:8])
}

// TakeMigrationLease takes the workload's Lease, renews it when the caller holds it already (a
// restarted worker resuming its own migration), or takes it over once it expired. A Lease another
// holder renews in time is not taken: the answer says who holds it.
func (a *Activities) TakeMigrationLease(ctx context.Context, in LeaseInput) (LeaseResult, error) {
	leases := a.Kube.CoordinationV1().Leases(a.ownNamespace())
	name := MigrationLeaseName(in.Workload)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy,
				kubeobj.LabelWorkloadNamespace: kubeobj.LabelValue(in.Workload.Namespace), kubeobj.LabelWorkloadName: kubeobj.LabelValue(in.Workload.Name)}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(in.Holder), LeaseDurationSeconds: ptr.To(int32(in.Duration.Seconds())),
				AcquireTime: &now, RenewTime: &now},
		}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
			return LeaseResult{}, fmt.Errorf("create migration lease %s: %w", name, err) // a racing creator: retried, then seen as held
		}
		return LeaseResult{Held: true, Holder: in.Holder}, nil
	}
	if err != nil {
		return LeaseResult{}, fmt.Errorf("get migration lease %s: %w", name, err)
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if holder != in.Holder && holder != "" && !kubeobj.LeaseExpired(l, now.Time) {
		return LeaseResult{Holder: holder}, nil
	}
	if holder != in.Holder {
		l.Spec.HolderIdentity, l.Spec.AcquireTime = ptr.To(in.Holder), &now
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	}
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, ptr.To(int32(in.Duration.Seconds()))
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
		return LeaseResult{}, fmt.Errorf("take migration lease %s: %w", name, err) // a conflict is retried and re-read
	}
	return LeaseResult{Held: true, Holder: in.Holder}, nil
}

// HoldMigrationLease renews the Lease every third of its duration, heartbeating, until the
// migration cancels it. It never creates the Lease: one that is gone was released (this migration
// ended, and the cancellation has not reached the activity yet) or deleted by someone; creating it
// again would leave a Lease behind that blocks the workload's next migration. It fails without
// retry when the Lease is gone or another holder took it.
func (a *Activities) HoldMigrationLease(ctx context.Context, in LeaseInput) error {
	every := max(in.Duration/3, 100*time.Millisecond)
	for {
		holder, err := a.renewMigrationLease(ctx, in)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			activity.GetLogger(ctx).Warn("migration lease not renewed", "error", err)
		case holder != in.Holder:
			if holder == "" {
				holder = "nobody: the Lease was deleted"
			}
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("migration lease of %s/%s taken by %s", in.Workload.Namespace, in.Workload.Name, holder), ErrLeaseLost, nil)
		}
		activity.RecordHeartbeat(ctx, holder)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// renewMigrationLease renews the caller's Lease and returns its holder ("" when it is gone).
func (a *Activities) renewMigrationLease(ctx context.Context, in LeaseInput) (string, error) {
	leases := a.Kube.CoordinationV1().Leases(a.ownNamespace())
	name := MigrationLeaseName(in.Workload)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get migration lease %s: %w", name, err)
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if holder != in.Holder {
		return holder, nil
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, ptr.To(int32(in.Duration.Seconds()))
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
		return "", fmt.Errorf("renew migration lease %s: %w", name, err) // a conflict is re-read next time
	}
	return holder, nil
}

// ReleaseMigrationLease deletes the Lease if the caller still holds it.
func (a *Activities) ReleaseMigrationLease(ctx context.Context, in LeaseInput) error {
	leases := a.Kube.CoordinationV1().Leases(a.ownNamespace())
	name := MigrationLeaseName(in.Workload)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get migration lease %s: %w", name, err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != in.Holder {
		return nil
	}
	err = leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release migration lease %s: %w", name, err)
	}
	return nil
}
