package activities

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// decisionEvents writes an Event on each Pod and ResourceClaim that reported the device, so that
// `kubectl describe` on them says what DeviceWarden decided and why. A failure to write is logged;
// the decision stands without it.
func (a *Activities) decisionEvents(ctx context.Context, in QuarantineInput, rule string, effect resourcev1.DeviceTaintEffect) {
	if in.Decision == "" {
		return
	}
	msg := fmt.Sprintf("device %s %s by %s (DeviceTaintRule %s, effect %s): %s", in.Device, strings.ToLower(in.Decision), in.Actor, rule, effect, in.Reason)
	a.tellReporters(ctx, in.Reporters, "Device"+in.Decision, corev1.EventTypeWarning, msg, rule+"."+strings.ToLower(string(effect)))
}

// tellReporters writes one Event on each Pod and claim of reporters. Each is named after the
// object and key, so a retried or repeated call writes it once.
func (a *Activities) tellReporters(ctx context.Context, reporters []policy.Reporter, reason, typ, msg, key string) {
	seen := map[string]bool{}
	for _, r := range reporters {
		for _, obj := range []corev1.ObjectReference{
			{Kind: "Pod", APIVersion: "v1", Namespace: r.Namespace, Name: r.Pod},
			{Kind: "ResourceClaim", APIVersion: resourcev1.SchemeGroupVersion.String(), Namespace: r.Namespace, Name: r.Claim},
		} {
			id := obj.Kind + "/" + obj.Namespace + "/" + obj.Name
			if obj.Name == "" || obj.Namespace == "" || seen[id] {
				continue
			}
			seen[id] = true
			a.event(ctx, obj, reason, typ, msg, obj.Name+"."+key)
		}
	}
}

// event writes one Event named name (trimmed to a valid length) and logs a failure; the decision
// stands without it.
func (a *Activities) event(ctx context.Context, obj corev1.ObjectReference, reason, typ, msg, name string) {
	if err := a.createEvent(ctx, obj, reason, typ, msg, name, "devicewarden.io/device"); err != nil {
		slog.Default().WarnContext(ctx, "event not recorded", "object", obj.Kind+"/"+obj.Namespace+"/"+obj.Name, "reason", reason, "error", err)
	}
}

// createEvent writes one Event about obj through CreateEvent.
func (a *Activities) createEvent(ctx context.Context, obj corev1.ObjectReference, reason, typ, msg, name, controller string) error {
	return CreateEvent(ctx, a.Kube, obj, reason, typ, msg, name, controller)
}

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
