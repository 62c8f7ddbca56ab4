package kubeobj

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/capacity"
)

// LeaseExpired says whether a Lease (a migration's, or a node's heartbeat) was not renewed in
// time; one that names no renewal or duration has expired.
func LeaseExpired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// AllocatedAt is when the claim's allocation was last written, from its managed fields; nil
// when no status write names it.
func AllocatedAt(c *resourcev1.ResourceClaim) *time.Time {
	var at *time.Time
	for _, m := range c.ManagedFields {
		if m.Subresource != "status" || m.Time == nil || m.FieldsV1 == nil || !strings.Contains(m.FieldsV1.GetRawString(), `"f:allocation"`) {
			continue
		}
		t := m.Time.Time
		if at == nil || t.After(*at) {
			at = &t
		}
	}
	return at
}

// EnsureDriverClass creates the DeviceClass name selecting every device of driver, unless it
// exists; created says whether this call made it.
func EnsureDriverClass(ctx context.Context, kube kubernetes.Interface, name, driver string) (created bool, err error) {
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver == " + strconv.Quote(driver)},
		}}},
	}
	_, err = kube.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create device class %s: %w", name, err)
	}
	return true, nil
}

// GrantRecords reads every claim's grant record (the request policies its shares were granted
// under) from DeviceWarden's namespace ns, by claim UID.
func GrantRecords(ctx context.Context, kube kubernetes.Interface, ns string) (map[string]string, error) {
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: capacity.GrantLabel})
	if err != nil {
		return nil, fmt.Errorf("list grant records in %s: %w", ns, err)
	}
	out := make(map[string]string, len(list.Items))
	for _, cm := range list.Items {
		out[cm.Labels[capacity.GrantLabel]] = cm.Data[capacity.GrantKey]
	}
	return out, nil
}

// EnsureNamespace creates a namespace DeviceWarden runs Pods in (checks, proofs) when it is missing.
// A cluster install may not create namespaces: its chart creates the ones it names, so Forbidden
// means "use it as it is", and a namespace that is really missing fails the first create in it.
func EnsureNamespace(ctx context.Context, kube kubernetes.Interface, ns string) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{LabelManagedBy: ManagedBy}}}, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}
