package remediation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// ErrRuleNameCollision is the non-retryable error type of a rule name that belongs to another device.
const ErrRuleNameCollision = "RuleNameCollision"

// QuarantineInput asks for a device to be tainted.
type QuarantineInput struct {
	Device     device.ID `json:"device"`
	Reason     string    `json:"reason"`
	Actor      string    `json:"actor"`
	WorkflowID string    `json:"workflowID"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// Effect is NoSchedule, NoExecute or None; the worker's --dry-run turns it into None.
	Effect resourcev1.DeviceTaintEffect `json:"effect"`
	// Key is the taint key (default the quarantine key; probation while on probation).
	Key string `json:"key,omitempty"`
	// Decision is the state the taint puts the device in (Quarantined, Restricted, ...); with
	// Reporters, the Pods and claims that reported it get an Event saying so.
	Decision  string            `json:"decision,omitempty"`
	Reporters []decide.Reporter `json:"reporters,omitempty"`
	// Members, when set, are the devices of the physical unit Device names (device.Unit.Device):
	// each gets its own rule, and all of them stand or fall together.
	Members []string `json:"members,omitempty"`
	// Unit is set on the rule of one member: the unit it fences a form of.
	Unit string `json:"unit,omitempty"`
	// PreviousAt and PreviousClosedAt are when the device's last quarantine began and ended (zero
	// for its first): a new quarantine counts the time between incidents, and a relapse when the
	// last ended within policy.RelapseWindow.
	PreviousAt       time.Time `json:"previousAt,omitempty"`
	PreviousClosedAt time.Time `json:"previousClosedAt,omitempty"`
}

// QuarantineResult says which rule holds the quarantine and whether this call created it.
type QuarantineResult struct {
	RuleName string `json:"ruleName"`
	Created  bool   `json:"created"`
	// Effect is the effect the rule carries now.
	Effect string `json:"effect,omitempty"`
	// Owner, when set, is another workflow that owns the rule: this one waits on it, and the rule
	// is handed to it when the owner releases (owners.go).
	Owner string `json:"owner,omitempty"`
}

func (a *Activities) effect(e resourcev1.DeviceTaintEffect) resourcev1.DeviceTaintEffect {
	if a.DryRun {
		return resourcev1.DeviceTaintEffectNone
	}
	return e
}

func (in QuarantineInput) key() string {
	if in.Key == "" {
		return decide.TaintQuarantine
	}
	return in.Key
}

// rule is the DeviceTaintRule the input asks for; a form of a unit's is labelled with the unit.
func (v ruleWriter) rule(in QuarantineInput) *resourcev1.DeviceTaintRule {
	a := v.a
	r := &resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{
			Name: in.Device.TaintRuleName(),
			Labels: map[string]string{
				kubeobj.LabelManagedBy: kubeobj.ManagedBy,
				kubeobj.LabelDriver:    kubeobj.LabelValue(in.Device.Driver),
				kubeobj.LabelPool:      kubeobj.LabelValue(in.Device.Pool),
				kubeobj.LabelDevice:    kubeobj.LabelValue(in.Device.Device),
			},
			Annotations: map[string]string{
				kubeobj.AnnotationDevice:    in.Device.String(),
				kubeobj.AnnotationReason:    in.Reason,
				kubeobj.AnnotationActor:     in.Actor,
				kubeobj.AnnotationWorkflow:  in.WorkflowID,
				kubeobj.AnnotationExpiresAt: in.ExpiresAt.UTC().Format(time.RFC3339),
				kubeobj.AnnotationUnit:      in.Unit,
			},
		},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{
				Driver: ptr.To(in.Device.Driver),
				Pool:   ptr.To(in.Device.Pool),
				Device: ptr.To(in.Device.Device),
			},
			Taint: resourcev1.DeviceTaint{Key: in.key(), Value: "true", Effect: a.effect(in.Effect)},
		},
	}
	if in.Unit != "" {
		r.Labels[kubeobj.LabelUnit] = unitLabel(in.Unit)
	}
	return r
}

// Quarantine creates the device's DeviceTaintRule, or brings the existing one up to date (a
// restriction upgraded to a quarantine changes reason and effect). The name is derived from the
// device, so retries and repeated signals never make a second rule. A rule that is being deleted is
// not in force: the call fails (and is retried) until it is gone, then creates a new one.
func (a *Activities) Quarantine(ctx context.Context, in QuarantineInput) (QuarantineResult, error) {
	res, err := (ruleWriter{a}).quarantine(ctx, in)
	if err == nil && res.Created {
		(ruleWriter{a}).incident(in, time.Now())
	}
	return res, err
}

// incident counts a new quarantine against the device's last one: the time between them, and a
// relapse when the last ended within policy.RelapseWindow.
func (v ruleWriter) incident(in QuarantineInput, now time.Time) {
	a := v.a
	if a.Metrics == nil || in.Decision != string(decide.Quarantined) || in.PreviousAt.IsZero() {
		return
	}
	a.Metrics.TimeBetweenIncidents.Observe(now.Sub(in.PreviousAt).Seconds())
	if !in.PreviousClosedAt.IsZero() && now.Sub(in.PreviousClosedAt) <= policy.RelapseWindow {
		a.Metrics.Relapses.Inc()
	}
}

func (v ruleWriter) quarantine(ctx context.Context, in QuarantineInput) (QuarantineResult, error) {
	a := v.a
	if len(in.Members) > 0 {
		return v.quarantineUnit(ctx, in)
	}
	if in.Device.DevicePlugin() {
		// No API taints a single device-plugin device; kubelet already withholds a device its plugin
		// reports Unhealthy. The quarantine is the workflow's record and alert.
		slog.Default().InfoContext(ctx, "device-plugin device: quarantine recorded without a DeviceTaintRule", "device", in.Device.String(), "reason", in.Reason)
		a.count("recorded")
		return QuarantineResult{}, nil
	}
	rule := v.rule(in)
	name := rule.Name
	if rule.Spec.Taint.Effect == resourcev1.DeviceTaintEffectNone {
		// Dry run: the rule only previews; Kubernetes reports what it would affect in its status.
		slog.Default().InfoContext(ctx, "dry run: would quarantine", "device", in.Device.String(), "rule", name, "reason", in.Reason, "actor", in.Actor)
	}
	rules := a.Kube.ResourceV1().DeviceTaintRules()
	_, err := rules.Create(ctx, rule, metav1.CreateOptions{FieldManager: kubeobj.FieldManager})
	if err == nil {
		a.count("created")
		a.decisionEvents(ctx, in, name, rule.Spec.Taint.Effect)
		return QuarantineResult{RuleName: name, Created: true, Effect: string(rule.Spec.Taint.Effect)}, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		a.count("error")
		return QuarantineResult{}, fmt.Errorf("create device taint rule %s: %w", name, err)
	}
	var res QuarantineResult
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		existing, err := v.ownRule(ctx, in.Device)
		if err != nil {
			return err
		}
		if existing.DeletionTimestamp != nil {
			return fmt.Errorf("device taint rule %s is being deleted; a new one is created once it is gone", name)
		}
		if !ownedBy(existing, in.WorkflowID) {
			// Another workflow fences this device: its rule stands for both, and this one waits
			// on it, never taking it over.
			res = QuarantineResult{RuleName: name, Effect: string(existing.Spec.Taint.Effect), Owner: owner(existing)}
			err := v.waitOn(ctx, existing, in.WorkflowID)
			if err == nil {
				a.count("waiting")
			}
			return err
		}
		res = QuarantineResult{RuleName: name, Effect: string(rule.Spec.Taint.Effect)}
		if existing.Spec.Taint.Key == rule.Spec.Taint.Key && existing.Spec.Taint.Effect == rule.Spec.Taint.Effect &&
			existing.Annotations[kubeobj.AnnotationReason] == in.Reason && existing.Annotations[kubeobj.AnnotationExpiresAt] == rule.Annotations[kubeobj.AnnotationExpiresAt] {
			a.count("existing")
			return nil
		}
		_, err = rules.Update(ctx, withTaint(existing, rule), metav1.UpdateOptions{FieldManager: kubeobj.FieldManager})
		if err == nil {
			a.count("updated")
		}
		return err
	})
	if err != nil {
		a.count("error")
		var app *temporal.ApplicationError
		if errors.As(err, &app) {
			return QuarantineResult{}, err
		}
		return QuarantineResult{}, fmt.Errorf("update device taint rule %s: %w", name, err)
	}
	a.decisionEvents(ctx, in, name, rule.Spec.Taint.Effect)
	return res, nil
}

// withTaint is a copy of existing with want's taint and its non-empty annotations.
func withTaint(existing, want *resourcev1.DeviceTaintRule) *resourcev1.DeviceTaintRule {
	updated := existing.DeepCopy()
	updated.Spec.Taint = want.Spec.Taint
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	for k, v := range want.Annotations {
		if v != "" {
			updated.Annotations[k] = v
		}
	}
	return updated
}

// ownRule gets the device's rule and checks that it is the device's (not a hash collision).
func (v ruleWriter) ownRule(ctx context.Context, id device.ID) (*resourcev1.DeviceTaintRule, error) {
	a := v.a
	name := id.TaintRuleName()
	existing, err := a.Kube.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get device taint rule %s: %w", name, err)
	}
	if existing.Annotations[kubeobj.AnnotationDevice] != id.String() {
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("device taint rule %s belongs to %q, not %s", name, existing.Annotations[kubeobj.AnnotationDevice], id),
			ErrRuleNameCollision, nil)
	}
	return existing, nil
}

// InspectInput asks for the state of a device's rule; Effect is what the policy wants.
type InspectInput struct {
	Device device.ID `json:"device"`
	Effect string    `json:"effect"`
	// Members are a unit's devices (QuarantineInput.Members).
	Members []string `json:"members,omitempty"`
}

// InspectRule reads the device's rule so the workflow can tell whether its fence still stands.
func (a *Activities) InspectRule(ctx context.Context, in InspectInput) (decide.RuleInfo, error) {
	if len(in.Members) > 0 {
		return (ruleWriter{a}).inspectUnit(ctx, in)
	}
	info := decide.RuleInfo{Name: in.Device.TaintRuleName(), WantEffect: string(a.effect(resourcev1.DeviceTaintEffect(in.Effect)))}
	if in.Device.DevicePlugin() {
		// Nothing to inspect: a device-plugin quarantine is a record only.
		info.Present, info.Key, info.Effect = true, decide.TaintQuarantine, info.WantEffect
		return info, nil
	}
	r, err := (ruleWriter{a}).ownRule(ctx, in.Device)
	if apierrors.IsNotFound(err) {
		return info, nil
	}
	if err != nil {
		return info, err
	}
	info.Present, info.Deleting = true, r.DeletionTimestamp != nil
	info.Key, info.Effect = r.Spec.Taint.Key, string(r.Spec.Taint.Effect)
	info.Actor = lastOtherWriter(r.ManagedFields)
	return info, nil
}

// lastOtherWriter is the newest field manager of an object that is not DeviceWarden.
func lastOtherWriter(fields []metav1.ManagedFieldsEntry) string {
	var who string
	var at time.Time
	for _, f := range fields {
		if f.Manager == kubeobj.FieldManager || f.Time == nil {
			continue
		}
		if who == "" || !f.Time.Time.Before(at) {
			who, at = f.Manager, f.Time.Time
		}
	}
	return who
}

// RefreshResult says what the rule carries after a refresh; Missing means there was no rule.
type RefreshResult struct {
	Missing bool   `json:"missing,omitempty"`
	Effect  string `json:"effect,omitempty"`
}

// RefreshRule rewrites an existing rule's taint key, effect, reason and expiry. It never creates
// one: a rule that is gone was removed by someone, which the workflow records instead.
func (a *Activities) RefreshRule(ctx context.Context, in QuarantineInput) (RefreshResult, error) {
	writer := ruleWriter{a}
	if len(in.Members) > 0 {
		return writer.refreshUnit(ctx, in)
	}
	if in.Device.DevicePlugin() {
		return RefreshResult{Effect: string(a.effect(in.Effect))}, nil
	}
	want := writer.rule(in)
	var res RefreshResult
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		r, err := writer.ownRule(ctx, in.Device)
		if apierrors.IsNotFound(err) {
			res.Missing = true
			return nil
		}
		if err != nil {
			return err
		}
		if r.DeletionTimestamp != nil {
			res.Missing = true
			return nil
		}
		if !ownedBy(r, in.WorkflowID) {
			// The owner's fence stands and only it changes the taint; this workflow waits on the
			// rule, so the owner's release hands it over rather than deleting it.
			res.Effect = string(r.Spec.Taint.Effect)
			return writer.waitOn(ctx, r, in.WorkflowID)
		}
		res.Effect = string(want.Spec.Taint.Effect)
		_, err = a.Kube.ResourceV1().DeviceTaintRules().Update(ctx, withTaint(r, want), metav1.UpdateOptions{FieldManager: kubeobj.FieldManager})
		return err
	})
	if err != nil {
		return RefreshResult{}, fmt.Errorf("refresh device taint rule %s: %w", want.Name, err)
	}
	return res, nil
}

// ReleaseInput asks for a device's rule to be deleted at the end of a successful review.
type ReleaseInput struct {
	Device device.ID `json:"device"`
	Reason string    `json:"reason"`
	Actor  string    `json:"actor"`
	// QuarantinedAt is when the quarantine began (for the time-in-quarantine metric).
	QuarantinedAt time.Time `json:"quarantinedAt"`
	// FirstReviewPassed counts the release toward the false-quarantine rate.
	FirstReviewPassed bool `json:"firstReviewPassed,omitempty"`
	// Node and Reporters get a DeviceReleased Event (kubectl describe node, pod, claim).
	Node      string            `json:"node,omitempty"`
	Reporters []decide.Reporter `json:"reporters,omitempty"`
	// Members are a unit's devices (QuarantineInput.Members): every one's rule is deleted.
	Members []string `json:"members,omitempty"`
	// WorkflowID is the releasing workflow: only the rules it owns are removed (owners.go).
	WorkflowID string `json:"workflowID,omitempty"`
	// NodeFence: the policy's ladder may have fenced the node while moving its holders, or a
	// reset's domain; the fences this workflow made go too.
	NodeFence bool `json:"nodeFence,omitempty"`
	// RepairedBy is the repair step the passing review followed ("" when none ran): the release
	// counts toward the time-to-repair metric of that step.
	RepairedBy string `json:"repairedBy,omitempty"`
	// Cause is the quarantine's cause class (cause.Cause.Class) and First the step it chose
	// ("ladder" when none was chosen): the time-to-repair metric's labels. Empty before them.
	Cause string `json:"cause,omitempty"`
	First string `json:"first,omitempty"`
}

// ReleaseRule deletes the device's rule (only if it is the device's own) and records the release.
func (a *Activities) ReleaseRule(ctx context.Context, in ReleaseInput) error {
	if len(in.Members) > 0 {
		if err := (ruleWriter{a}).releaseUnitRules(ctx, in.Device, in.Members, in.WorkflowID); err != nil {
			return err
		}
	} else if err := (ruleWriter{a}).deleteOwnRule(ctx, in.Device, in.WorkflowID); err != nil {
		return err
	}
	if in.NodeFence && in.Node != "" {
		if err := (nodeSteps{a}).unfenceNode(ctx, in.Node, in.WorkflowID); err != nil {
			return err
		}
		// A reset that moved its domain's holders fenced the domain's other devices.
		if err := (domains{a}).unfenceDomain(ctx, in.Node, in.WorkflowID); err != nil {
			return err
		}
		(domains{a}).freeDomainPermits(ctx, in.WorkflowID)
		// A quarantine that ends while its node step moves holders gives the node's permit
		// back too, or the pool is refused reboots until the hold ends.
		(permitBook{a}).releaseNode(in.Node, in.Device)
	}
	slog.Default().InfoContext(ctx, "device released", "device", in.Device.String(), "actor", in.Actor, "reason", in.Reason)
	msg := fmt.Sprintf("device %s released by %s: %s", in.Device, in.Actor, in.Reason)
	key := in.Device.TaintRuleName() + ".released." + strings.ToLower(in.QuarantinedAt.UTC().Format("20060102t150405"))
	if in.Node != "" {
		a.event(ctx, corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: in.Node}, "DeviceReleased", corev1.EventTypeNormal, msg, in.Node+"."+key)
	}
	a.tellReporters(ctx, in.Reporters, "DeviceReleased", corev1.EventTypeNormal, msg, key)
	if m := a.Metrics; m != nil {
		m.Releases.WithLabelValues("released").Inc()
		if !in.QuarantinedAt.IsZero() {
			m.QuarantineSeconds.Observe(time.Since(in.QuarantinedAt).Seconds())
		}
		if in.FirstReviewPassed {
			m.FalseQuarantines.Inc()
		}
		if in.RepairedBy != "" && !in.QuarantinedAt.IsZero() {
			m.RepairSeconds.WithLabelValues(in.RepairedBy, cmp.Or(in.Cause, "unknown"), cmp.Or(in.First, string(policy.FirstLadder))).Observe(time.Since(in.QuarantinedAt).Seconds())
		}
	}
	return nil
}

// deleteOwnRule removes workflow wf's fence of the device: the device's rule, if it is the
// device's and wf owns it, is deleted, or handed to the first workflow waiting on it; a rule
// another workflow owns only loses wf from its waiting list.
func (v ruleWriter) deleteOwnRule(ctx context.Context, id device.ID, wf string) error {
	a := v.a
	if id.DevicePlugin() {
		return nil
	}
	rules := a.Kube.ResourceV1().DeviceTaintRules()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		r, err := v.ownRule(ctx, id)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		if !ownedBy(r, wf) {
			left := withoutWaiter(r, wf)
			if left == nil {
				slog.Default().InfoContext(ctx, "device taint rule left to its owner", "rule", r.Name, "owner", owner(r), "releasing", wf)
				return nil
			}
			if _, err := rules.Update(ctx, left, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
				return fmt.Errorf("stop waiting on device taint rule %s: %w", r.Name, err)
			}
			return nil
		}
		if next := handedOn(r, time.Now()); next != nil {
			return v.handOver(ctx, r, next)
		}
		err = rules.Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &r.UID, ResourceVersion: &r.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete device taint rule %s: %w", r.Name, err)
		}
		return nil
	})
}
