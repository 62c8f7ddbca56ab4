// Package capacitycheck reads the cluster for the capacity checks: every ResourceSlice, claim and
// grant record, and each node's heartbeat. The hygiene activities and the CLI's capacity commands
// (and the benchmark) call it alike.
package capacitycheck

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// Check reads every ResourceSlice and ResourceClaim and checks the shared-capacity invariants. A
// share is checked against the policy its claim recorded when first seen (grant records in own,
// DeviceWarden's namespace); with Record, claims without a record get one now.
func Check(ctx context.Context, kube kubernetes.Interface, own string, in capacity.CheckInput) (capacity.CheckReport, error) {
	sl, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return capacity.CheckReport{}, fmt.Errorf("list resource slices: %w", err)
	}
	// The grant records are read before the claims: every record read then belongs to a claim
	// made before the list, so a claim missing from the list is gone. Read after, a record that a
	// concurrent check wrote for a claim newer than the list would look orphaned and be deleted.
	grants, err := kubeobj.GrantRecords(ctx, kube, own)
	if err != nil {
		return capacity.CheckReport{}, err
	}
	cl, err := kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return capacity.CheckReport{}, fmt.Errorf("list resource claims: %w", err)
	}
	ci := capacity.Input{Tenants: in.Tenants}
	rep := capacity.CheckReport{Claims: len(cl.Items)}
	for i := range sl.Items {
		ci.Slices = append(ci.Slices, &sl.Items[i])
		rep.Devices += len(sl.Items[i].Spec.Devices)
	}
	live := map[string]bool{}
	for i := range cl.Items {
		c := &cl.Items[i]
		live[string(c.UID)] = true
		had, err := ci.AddClaim(c, grants[string(c.UID)])
		if err != nil {
			return capacity.CheckReport{}, err
		}
		if !had && in.Record {
			recorded, err := recordGrant(ctx, kube, own, c, ci.Slices)
			if err != nil {
				return capacity.CheckReport{}, err
			}
			if recorded {
				rep.Recorded++
			}
		}
	}
	if in.Record {
		if err := pruneGrants(ctx, kube, own, grants, live); err != nil {
			return capacity.CheckReport{}, err
		}
	}
	rep.Violations = capacity.Check(ci)
	nodes, err := NodeStates(ctx, kube, time.Now())
	if err != nil {
		return capacity.CheckReport{}, err
	}
	rep.Unknown = unknownAllocations(ci.Claims, nodes)
	return rep, nil
}

// recordGrant writes the claim's grant record, the request policies its shares are granted under
// now, in DeviceWarden's namespace (where tenants cannot write). A record already there is kept:
// it was written first.
func recordGrant(ctx context.Context, kube kubernetes.Interface, own string, c *resourcev1.ResourceClaim, slices []*resourcev1.ResourceSlice) (bool, error) {
	snap := capacity.Snapshot(c, slices)
	if snap == "" {
		return false, nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: capacity.GrantConfigMap(string(c.UID)), Namespace: own,
		Labels:      map[string]string{capacity.GrantLabel: string(c.UID)},
		Annotations: map[string]string{"devicewarden.io/claim": c.Namespace + "/" + c.Name, "devicewarden.io/claim-version": c.ResourceVersion}},
		Data: map[string]string{capacity.GrantKey: snap}}
	_, err := kube.CoreV1().ConfigMaps(own).Create(ctx, cm, metav1.CreateOptions{FieldManager: kubeobj.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record the grant of claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	return true, nil
}

// pruneGrants deletes the grant records of claims that are gone.
func pruneGrants(ctx context.Context, kube kubernetes.Interface, own string, grants map[string]string, live map[string]bool) error {
	for uid := range grants {
		if live[uid] {
			continue
		}
		err := kube.CoreV1().ConfigMaps(own).Delete(ctx, capacity.GrantConfigMap(uid), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the grant record of gone claim %s: %w", uid, err)
		}
	}
	return nil
}
