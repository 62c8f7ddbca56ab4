package rollouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// EvaluateRolloutGates measures the phase from the API (and its PromQL gates from Prometheus),
// checks the gates, and keeps the report in a ConfigMap in DeviceWarden's namespace. Each class of
// allocation failure goes to its own alert.
func (a *Activities) EvaluateRolloutGates(ctx context.Context, in api.GateInput) (rolloutplan.Report, error) {
	if err := checkPhase(in.Plan, in.Phase, ErrInvalidGateInput); err != nil {
		return rolloutplan.Report{}, err
	}
	snap, err := a.rolloutSnapshot(ctx, in.Plan, in.Phase, in.Expected, true)
	if err != nil {
		return rolloutplan.Report{}, err
	}
	ph := in.Plan.Phases[in.Phase]
	queries := a.promQueries(ctx, in.Plan.Prometheus, ph.Gates.Queries, snap.Now)
	// Timestamps in the API are whole seconds: a claim made in the second enable ran counts.
	r := rolloutplan.Evaluate(in.Plan, in.Phase, in.Since.Truncate(time.Second), snap, queries)
	if err := a.saveReport(ctx, in.Plan.Name, r); err != nil {
		return rolloutplan.Report{}, err
	}
	if a.Metrics != nil {
		result := "passed"
		if !r.Passed() {
			result = "failed"
		}
		a.Metrics.RolloutGates.WithLabelValues(result).Inc()
	}
	counts := rolloutplan.FailureCounts(r.Failures)
	for _, class := range []string{rolloutplan.FailureNeedsCleanup, rolloutplan.FailureNonRetryable, rolloutplan.FailureRetryable} {
		if counts[class] == 0 {
			continue
		}
		level := decide.LevelWarning
		if class != rolloutplan.FailureRetryable {
			level = decide.LevelCritical
		}
		var objs []string
		for _, f := range r.Failures {
			if f.Class == class {
				objs = append(objs, f.Object+" ("+f.Reason+")")
			}
		}
		if a.Alerts == nil {
			continue
		}
		_ = a.Alerts.Alert(ctx, notify.AlertInput{Level: level, WorkflowID: api.RolloutID(in.Plan.Name),
			Text: fmt.Sprintf("rollout %s phase %s: %d %s allocation failures: %s", in.Plan.Name, ph.Name, counts[class], class, strings.Join(objs, "; "))})
	}
	return r, nil
}

// promQueries asks Prometheus each PromQL gate's query; an error is kept as the gate's answer.
func (a *Activities) promQueries(ctx context.Context, address string, gates []rolloutplan.PromQueryGate, now time.Time) []rolloutplan.QueryResult {
	if len(gates) == 0 {
		return nil
	}
	out := make([]rolloutplan.QueryResult, len(gates))
	c, err := promapi.NewClient(promapi.Config{Address: address})
	for i, g := range gates {
		out[i].Name = g.Name
		if err != nil {
			out[i].Error = "prometheus client: " + err.Error()
			continue
		}
		v, err := queryValue(ctx, promv1.NewAPI(c), g.Query, now)
		switch {
		case errors.Is(err, errNoSamples):
			out[i].NoData = "no samples"
		case err != nil:
			out[i].Error = err.Error()
		case rolloutplan.NoDataOf(v) != "":
			out[i].NoData = rolloutplan.NoDataOf(v) // never kept as a value: JSON has no NaN or Inf
		default:
			out[i].Value = v
		}
	}
	return out
}

// ErrInvalidGateInput is the error type of a gate measurement that no retry can make: the plan has
// no such phase.
const ErrInvalidGateInput = "InvalidGateInput"

// errNoSamples: the query answered with an empty vector (no series matched, nothing observed).
var errNoSamples = errors.New("no samples")

// queryValue is a query's one value: a scalar, or a vector of exactly one sample.
func queryValue(ctx context.Context, api promv1.API, q string, now time.Time) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, _, _, err := api.Query(ctx, q, now)
	if err != nil {
		return 0, fmt.Errorf("query %q: %w", q, err)
	}
	switch v := v.(type) {
	case *model.Scalar:
		return float64(v.Value), nil
	case model.Vector:
		if len(v) == 0 {
			return 0, errNoSamples
		}
		if len(v) != 1 {
			return 0, fmt.Errorf("query %q returned %d samples, want exactly one", q, len(v))
		}
		return float64(v[0].Value), nil
	}
	return 0, fmt.Errorf("query %q returned a %s, want a scalar or one sample", q, v.Type())
}

func (a *Activities) saveReport(ctx context.Context, name string, r rolloutplan.Report) error {
	var data strings.Builder
	enc := json.NewEncoder(&data)
	enc.SetEscapeHTML(false) // the report says claim->allocated, not claim-\u003eallocated
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode gate report: %w", err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: kubeobj.ReportConfigMap(name, r.Phase), Namespace: a.ownNamespace(),
			Labels: map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, kubeobj.LabelRollout: name}},
		Data: map[string]string{"report.json": data.String()},
	}
	cms := a.Kube.CoreV1().ConfigMaps(cm.Namespace)
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); apierrors.IsAlreadyExists(err) {
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager})
		if err != nil {
			return fmt.Errorf("keep gate report: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("keep gate report: %w", err)
	}
	return nil
}

// BlockNewClaims creates a ValidatingAdmissionPolicy and its binding that refuse new
// ResourceClaims for the phase's classes. Existing claims, bound or not, are untouched.
func (a *Activities) BlockNewClaims(ctx context.Context, in api.BlockInput) (err error) {
	defer func() { err = permanent(err) }()
	name := kubeobj.BlockName(in.Rollout, in.Phase)
	quoted := make([]string, len(in.Classes))
	for i, c := range in.Classes {
		quoted[i] = fmt.Sprintf("%q", c)
	}
	list := "[" + strings.Join(quoted, ", ") + "]"
	expr := fmt.Sprintf("!has(object.spec.devices) || !has(object.spec.devices.requests) || !object.spec.devices.requests.exists(r, "+
		"(has(r.exactly) && r.exactly.deviceClassName in %s) || (has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName in %s)))", list, list)
	msg := fmt.Sprintf("DeviceWarden rollout %s phase %s was rolled back (%s): new claims for %s are refused until the phase is enabled again",
		in.Rollout, in.Phase, in.Reason, strings.Join(in.Classes, ", "))
	if in.Except != "" {
		// Tenants wait for the enforcement proof, whose load Pods run in Except.
		expr = fmt.Sprintf("request.namespace == %q || (%s)", in.Except, expr)
		msg = fmt.Sprintf("DeviceWarden rollout %s phase %s: %s: new claims for %s are refused until the driver is proven to hold each tenant to its share",
			in.Rollout, in.Phase, in.Reason, strings.Join(in.Classes, ", "))
	}
	labels := map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, kubeobj.LabelRollout: in.Rollout}
	fail := admissionv1.Fail
	pol := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"resourceclaims"}},
				}}}},
			Validations: []admissionv1.Validation{{Expression: expr, Message: msg}},
		},
	}
	if err := a.ensureBlockPolicy(ctx, pol); err != nil {
		return err
	}
	bind := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	bindings := a.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	_, err = bindings.Create(ctx, bind, metav1.CreateOptions{FieldManager: kubeobj.FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create admission policy binding %s: %w", name, err)
	}
	if err == nil && a.Metrics != nil && in.Except == "" {
		a.Metrics.RolloutRollbacks.Inc() // once per rollback: a retried block finds the binding there
	}
	for _, class := range in.Classes {
		if err := a.awaitBlock(ctx, name, class, in.Except, true); err != nil {
			return err
		}
	}
	return nil
}

// ensureBlockPolicy creates the block's admission policy, or brings one already there up to date:
// a block made for an earlier class list (a plan edited, a retried rollback) must refuse claims for
// every class of the phase now, not only the ones it was made for.
func (a *Activities) ensureBlockPolicy(ctx context.Context, pol *admissionv1.ValidatingAdmissionPolicy) error {
	vaps := a.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	_, err := vaps.Create(ctx, pol, metav1.CreateOptions{FieldManager: kubeobj.FieldManager})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create admission policy %s: %w", pol.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		old, err := vaps.Get(ctx, pol.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(old.Spec.Validations, pol.Spec.Validations) &&
			equality.Semantic.DeepEqual(old.Spec.MatchConstraints.ResourceRules, pol.Spec.MatchConstraints.ResourceRules) {
			return nil
		}
		upd := old.DeepCopy()
		upd.Spec.Validations, upd.Spec.MatchConstraints.ResourceRules, upd.Spec.FailurePolicy = pol.Spec.Validations, pol.Spec.MatchConstraints.ResourceRules, pol.Spec.FailurePolicy
		_, err = vaps.Update(ctx, upd, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("update admission policy %s: %w", pol.Name, err)
	}
	return nil
}

// blockProof bounds how long a block may take to be enforced after its binding is created, or
// lifted after it is deleted (the apiserver loads and drops policies within about a second).
const blockProof = 30 * time.Second

// awaitBlock returns once a dry-run claim for class shows the block name in force (inForce: refused
// by it) or lifted (admitted, or refused by something else). Until a block is in force new claims
// may still be admitted, and the phase is not rolled back yet (the rollout says "blocking"); until
// it is lifted, a phase said to be open would refuse its tenants. Where no dry-run claim can be made
// (no namespace it may create claims in), nothing can be told: a block is then not proven, and a
// warning says so.
func (a *Activities) awaitBlock(ctx context.Context, name, class, except string, inForce bool) error {
	deadline := time.Now().Add(blockProof)
	for {
		admitted, err := a.tryBlockedClaim(ctx, name, class, except)
		switch {
		case err != nil:
			if inForce {
				slog.Default().Warn("rollback block not proven: no dry-run claim could be made", "block", name, "error", err)
			}
			return nil
		case admitted != inForce:
			return nil
		case time.Now().After(deadline) && inForce:
			return fmt.Errorf("block %s not in force after %s: a dry-run claim for %s is still admitted", name, blockProof, class)
		case time.Now().After(deadline):
			return fmt.Errorf("block %s still in force %s after it was deleted: a dry-run claim for %s is refused by it", name, blockProof, class)
		}
		heartbeat(ctx, "waiting for the apiserver to load or drop "+name)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tryBlockedClaim makes a dry-run claim for class, in the probe namespace or else in DeviceWarden's
// own (never in except, which the block lets through): admitted false when the block refused it.
// An error means no namespace let one be made.
func (a *Activities) tryBlockedClaim(ctx context.Context, name, class, except string) (admitted bool, err error) {
	err = fmt.Errorf("no namespace but %s to try a claim in", except)
	for _, ns := range []string{policy.DefaultProbeNamespace, a.ownNamespace()} {
		if ns == except {
			continue
		}
		claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "devicewarden-block-proof-", Namespace: ns},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "proof",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}}}}}
		_, err = a.Kube.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return true, nil
		}
		if strings.Contains(err.Error(), name) {
			return false, nil
		}
	}
	return false, err
}

// UnblockNewClaims removes a phase's admission block (idempotent) and returns once a dry-run claim
// for each of its classes is no longer refused by it: the apiserver drops a deleted policy within
// a second or so, and a phase said to be open should take its tenants' claims.
func (a *Activities) UnblockNewClaims(ctx context.Context, in api.BlockInput) (err error) {
	defer func() { err = permanent(err) }()
	name := kubeobj.BlockName(in.Rollout, in.Phase)
	err = a.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete admission policy binding %s: %w", name, err)
	}
	err = a.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete admission policy %s: %w", name, err)
	}
	for _, class := range in.Classes {
		if err := a.awaitBlock(ctx, name, class, "", false); err != nil {
			return err
		}
	}
	return nil
}
