package kubeobj

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Event reasons. Decisions on a device write "Device"+decision on its reporters.
const (
	// EventNodeEscalated is the reason of the Event on a node whose device failures escalated.
	EventNodeEscalated = "DeviceFailuresOnNode"
	// Claim hygiene, on a ResourceClaim.
	EventClaimLeaked        = "ClaimLeaked"
	EventClaimShareStuck    = "ClaimShareStuck"
	EventClaimUnknown       = "ClaimAllocationUnknown"
	EventLeakedClaimDeleted = "LeakedClaimDeleted"
	// EventRepairTry is on a node for each repair step tried on one of its devices (a reset, a
	// reboot), passed or not.
	EventRepairTry = "DeviceRepairTry"
	// A rollout, on the nodes it switches.
	EventRolloutEnabled    = "RolloutEnabled"
	EventRolloutRolledBack = "RolloutRolledBack"
	// EventEnforcementProven and EventEnforcementNotProven record an enforcement proof's verdict on
	// the node it ran on.
	EventEnforcementProven    = "EnforcementProven"
	EventEnforcementNotProven = "EnforcementNotProven"
)

// CreateEvent writes one Event about obj, named name (trimmed to a valid length) and reported by
// controller; one already there by that name is success, so a fixed name writes it once. Every
// Event DeviceWarden writes (decisions, claim hygiene, rollouts, the watcher's ambiguous reports)
// goes through it.
func CreateEvent(ctx context.Context, kube kubernetes.Interface, obj corev1.ObjectReference, reason, typ, msg, name, controller string) error {
	if len(name) > 253 {
		name = name[len(name)-253:]
	}
	ns := obj.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault // cluster-scoped objects (nodes) keep their Events there
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: strings.TrimLeft(name, ".-"), Namespace: ns},
		InvolvedObject: obj, Reason: reason, Message: msg, Type: typ,
		Source:              corev1.EventSource{Component: "devicewarden"},
		ReportingController: controller, ReportingInstance: "devicewarden",
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := kube.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
