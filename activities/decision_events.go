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
)

// decisionEvents writes an Event on each Pod and ResourceClaim that reported the device, so that
// `kubectl describe` on them says what DeviceWarden decided and why. Each Event is named after the
// object, the rule and the effect: a retried or repeated call writes it once. A failure to write
// is logged; the decision stands without it.
func (a *Activities) decisionEvents(ctx context.Context, in QuarantineInput, rule string, effect resourcev1.DeviceTaintEffect) {
	if in.Decision == "" {
		return
	}
	reason := "Device" + in.Decision
	msg := fmt.Sprintf("device %s %s by %s (DeviceTaintRule %s, effect %s): %s", in.Device, strings.ToLower(in.Decision), in.Actor, rule, effect, in.Reason)
	seen := map[string]bool{}
	for _, r := range in.Reporters {
		for _, obj := range []corev1.ObjectReference{
			{Kind: "Pod", APIVersion: "v1", Namespace: r.Namespace, Name: r.Pod},
			{Kind: "ResourceClaim", APIVersion: resourcev1.SchemeGroupVersion.String(), Namespace: r.Namespace, Name: r.Claim},
		} {
			key := obj.Kind + "/" + obj.Namespace + "/" + obj.Name
			if obj.Name == "" || obj.Namespace == "" || seen[key] {
				continue
			}
			seen[key] = true
			now := metav1.Now()
			name := fmt.Sprintf("%s.%s.%s", obj.Name, rule, strings.ToLower(string(effect)))
			if len(name) > 253 {
				name = name[len(name)-253:]
			}
			ev := &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: strings.TrimLeft(name, ".-"), Namespace: obj.Namespace},
				InvolvedObject: obj, Reason: reason, Message: msg, Type: corev1.EventTypeWarning,
				Source:              corev1.EventSource{Component: "devicewarden"},
				ReportingController: "devicewarden.io/device", ReportingInstance: "devicewarden",
				FirstTimestamp: now, LastTimestamp: now, Count: 1,
			}
			if _, err := a.Kube.CoreV1().Events(obj.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				slog.Default().WarnContext(ctx, "event not recorded", "object", key, "reason", reason, "error", err)
			}
		}
	}
}
