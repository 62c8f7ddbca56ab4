// Package activities carries out DeviceWarden's side effects against Kubernetes.
package activities

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Labels and annotations DeviceWarden puts on the objects it owns.
const (
	TaintKey            = "devicewarden.io/quarantine"
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	ManagedBy           = "devicewarden"
	LabelDriver         = "devicewarden.io/driver"
	LabelPool           = "devicewarden.io/pool"
	LabelDevice         = "devicewarden.io/device"
	AnnotationDevice    = "devicewarden.io/device-id"
	AnnotationReason    = "devicewarden.io/reason"
	AnnotationActor     = "devicewarden.io/actor"
	AnnotationWorkflow  = "devicewarden.io/workflow-id"
	AnnotationExpiresAt = "devicewarden.io/expires-at"
)

// Activities holds the clients every activity uses. The worker builds it once.
type Activities struct {
	Kube kubernetes.Interface
	// Metrics may be nil in unit tests.
	Metrics *metrics.Metrics
	// Breaker answers permit requests; BreakerConfig is the cap sent with each one.
	Breaker       BreakerClient
	BreakerConfig policy.BreakerConfig
	// Alerter may be nil: alerts are then only logged and counted.
	Alerter Alerter
	// Nodes receives device failures for node-level escalation; nil disables it.
	Nodes NodeReporter

	devices deviceCount
}

func (a *Activities) count(result string) {
	if a.Metrics != nil {
		a.Metrics.Quarantines.WithLabelValues(result).Inc()
	}
}

// QuarantineInput asks for a device to be tainted.
type QuarantineInput struct {
	Device     device.ID `json:"device"`
	Reason     string    `json:"reason"`
	Actor      string    `json:"actor"`
	WorkflowID string    `json:"workflowID"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// Effect is NoSchedule, NoExecute or None (dry run).
	Effect resourcev1.DeviceTaintEffect `json:"effect"`
}

// QuarantineResult says which rule holds the quarantine and whether this call created it.
type QuarantineResult struct {
	RuleName string `json:"ruleName"`
	Created  bool   `json:"created"`
}

// Quarantine creates the device's DeviceTaintRule, or brings the existing one up to date (a
// restriction upgraded to a quarantine changes reason and effect). The name is derived from the
// device, so retries and repeated signals never make a second rule.
func (a *Activities) Quarantine(ctx context.Context, in QuarantineInput) (QuarantineResult, error) {
	if in.Device.DevicePlugin() {
		// No API taints a single device-plugin device; kubelet already withholds a device its plugin
		// reports Unhealthy. The quarantine is the workflow's record and alert.
		slog.Default().InfoContext(ctx, "device-plugin device: quarantine recorded without a DeviceTaintRule", "device", in.Device.String(), "reason", in.Reason)
		a.count("recorded")
		return QuarantineResult{}, nil
	}
	name := in.Device.TaintRuleName()
	if in.Effect == resourcev1.DeviceTaintEffectNone {
		// Dry run: the rule only previews; Kubernetes reports what it would affect in its status.
		slog.Default().InfoContext(ctx, "dry run: would quarantine", "device", in.Device.String(), "rule", name, "reason", in.Reason, "actor", in.Actor)
	}
	rule := &resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				LabelManagedBy: ManagedBy,
				LabelDriver:    labelValue(in.Device.Driver),
				LabelPool:      labelValue(in.Device.Pool),
				LabelDevice:    labelValue(in.Device.Device),
			},
			Annotations: map[string]string{
				AnnotationDevice:    in.Device.String(),
				AnnotationReason:    in.Reason,
				AnnotationActor:     in.Actor,
				AnnotationWorkflow:  in.WorkflowID,
				AnnotationExpiresAt: in.ExpiresAt.UTC().Format(time.RFC3339),
			},
		},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{
				Driver: ptr.To(in.Device.Driver),
				Pool:   ptr.To(in.Device.Pool),
				Device: ptr.To(in.Device.Device),
			},
			Taint: resourcev1.DeviceTaint{Key: TaintKey, Value: "true", Effect: in.Effect},
		},
	}
	_, err := a.Kube.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{})
	if err == nil {
		a.count("created")
		return QuarantineResult{RuleName: name, Created: true}, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		a.count("error")
		return QuarantineResult{}, fmt.Errorf("create device taint rule %s: %w", name, err)
	}
	existing, err := a.Kube.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		a.count("error")
		return QuarantineResult{}, fmt.Errorf("get device taint rule %s: %w", name, err)
	}
	if existing.Annotations[AnnotationDevice] != in.Device.String() {
		a.count("error")
		return QuarantineResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("device taint rule %s belongs to %q, not %s", name, existing.Annotations[AnnotationDevice], in.Device),
			"RuleNameCollision", nil)
	}
	if existing.Spec.Taint.Effect != in.Effect || existing.Annotations[AnnotationReason] != in.Reason {
		updated := existing.DeepCopy()
		updated.Spec.Taint = rule.Spec.Taint
		for k, v := range rule.Annotations {
			updated.Annotations[k] = v
		}
		if _, err := a.Kube.ResourceV1().DeviceTaintRules().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
			a.count("error")
			return QuarantineResult{}, fmt.Errorf("update device taint rule %s: %w", name, err)
		}
		a.count("updated")
		return QuarantineResult{RuleName: name}, nil
	}
	a.count("existing")
	return QuarantineResult{RuleName: name, Created: false}, nil
}

// labelValue keeps a value within the 63-character label limit; the full value is in an annotation.
func labelValue(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}
