package watcher

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TermBase is the first term a watcher takes from a counter. Watchers before the counter took
// their term from the clock when they started (UnixNano: about 1.8e18 in 2026, 2^62 in 2116), so
// every counted term orders after every one of theirs, and devices whose workflows a clock-term
// watcher signalled still hear the first counted watcher.
const TermBase = int64(1) << 62

// TermLease is the Lease whose spec.leaseTransitions counts the watchers that have started.
const TermLease = "devicewarden-watcher-term"

// LeaseTerm takes the next term from a counter in the Lease namespace/name, incremented by
// compare-and-swap on its resourceVersion: each watcher that starts (a restart, a new leader, a
// replica without leader election) gets a term larger than every watcher before it, whatever the
// clocks of the nodes they run on say. Two watchers never share one.
func LeaseTerm(kube kubernetes.Interface, namespace, name string) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		leases := kube.CoordinationV1().Leases(namespace)
		for {
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
					Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](1)}}
				if _, err = leases.Create(ctx, l, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
					continue // another watcher created it first: take the next one
				}
				if err != nil {
					return 0, fmt.Errorf("create term lease %s/%s: %w", namespace, name, err)
				}
				return TermBase + 1, nil
			}
			if err != nil {
				return 0, fmt.Errorf("get term lease %s/%s: %w", namespace, name, err)
			}
			n := ptr.Deref(l.Spec.LeaseTransitions, 0) + 1
			l.Spec.LeaseTransitions = &n
			if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
				continue // another watcher counted in between: count again
			}
			if err != nil {
				return 0, fmt.Errorf("update term lease %s/%s: %w", namespace, name, err)
			}
			return TermBase + int64(n), nil
		}
	}
}
