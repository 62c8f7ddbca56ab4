package remediation

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
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
func (a *Activities) tellReporters(ctx context.Context, reporters []decide.Reporter, reason, typ, msg, key string) {
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
	if err := kubeobj.CreateEvent(ctx, a.Kube, obj, reason, typ, msg, name, "devicewarden.io/device"); err != nil {
		slog.Default().WarnContext(ctx, "event not recorded", "object", obj.Kind+"/"+obj.Namespace+"/"+obj.Name, "reason", reason, "error", err)
	}
}

// AppFaultInput is an application's own fault on a device, which stays in service.
type AppFaultInput struct {
	Device    device.ID         `json:"device"`
	Reason    string            `json:"reason"`
	Reporters []decide.Reporter `json:"reporters,omitempty"`
	// At names the fault: each gets its Events, a retried call writes them once.
	At time.Time `json:"at"`
}

// NoteAppFault tells the tenant: an Event on each Pod and claim that holds the device says the
// fault was the application's and the device stays in service.
func (a *Activities) NoteAppFault(ctx context.Context, in AppFaultInput) error {
	msg := fmt.Sprintf("device %s: %s", in.Device, in.Reason)
	a.tellReporters(ctx, in.Reporters, "DeviceApplicationFault", corev1.EventTypeWarning, msg, fmt.Sprintf("appfault.%d", in.At.Unix()))
	return nil
}
