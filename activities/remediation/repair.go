package remediation

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// A repair step runs as a check does (RunCheck with kind decide.ActRepair): a Pod with a claim
// only the device satisfies, tolerating its quarantine, keyed by device and try, its outcome read
// from the Pod. This file keeps what a retired device leaves behind.

// RetireInput asks to keep a retired device's evidence.
type RetireInput struct {
	Device     device.ID         `json:"device"`
	Node       string            `json:"node"`
	WorkflowID string            `json:"workflowID"`
	Reason     string            `json:"reason"`
	Evidence   map[string]string `json:"evidence"`
}

// RecordRetirement writes the device's evidence bundle, a ConfigMap in DeviceWarden's namespace,
// and a Warning Event on it that says to replace the device. A device retired again (released by
// a person, failed later) gets its bundle rewritten: the newest retirement is the one to act on.
func (a *Activities) RecordRetirement(ctx context.Context, in RetireInput) (string, error) {
	ns, name := kubeobj.Own(a.OwnNamespace), kubeobj.RetiredName(in.Device)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, kubeobj.LabelRetired: "true", kubeobj.LabelDevice: kubeobj.LabelValue(in.Device.Device)},
			Annotations: map[string]string{kubeobj.AnnotationDevice: in.Device.String(), kubeobj.AnnotationWorkflow: in.WorkflowID}},
		Data: in.Evidence,
	}
	cms := a.Kube.CoreV1().ConfigMaps(ns)
	old, err := cms.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create evidence %s/%s: %w", ns, name, err)
		}
	case err != nil:
		return "", fmt.Errorf("get evidence %s/%s: %w", ns, name, err)
	default:
		cm.ResourceVersion = old.ResourceVersion
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
			return "", fmt.Errorf("update evidence %s/%s: %w", ns, name, err)
		}
	}
	msg := fmt.Sprintf("device %s on node %s retired: %s; replace it (evidence in ConfigMap %s/%s)", in.Device, in.Node, in.Reason, ns, name)
	a.event(ctx, corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ns, Name: name}, "DeviceRetired", corev1.EventTypeWarning, msg, name+".retired")
	return name, nil
}
