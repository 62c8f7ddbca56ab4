package remediation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// A physical unit (a GPU and its partitions) is fenced by one DeviceTaintRule per device it is
// published as: a rule selects one device name, and Kubernetes carries no taint from a device to
// the other forms of its hardware. The rules are made, refreshed and deleted together.

// memberIDs are the unit's devices as IDs in the unit's pool.
func memberIDs(unit device.ID, members []string) []device.ID {
	out := make([]device.ID, 0, len(members))
	for _, m := range members {
		out = append(out, device.ID{Driver: unit.Driver, Pool: unit.Pool, Device: m})
	}
	return out
}

// member is the input for one device of the unit: its own rule, marked with the unit, and no
// Events (the unit's decision gets them once).
func (in QuarantineInput) member(id device.ID) QuarantineInput {
	one := in
	one.Device, one.Members, one.Unit, one.Decision, one.Reporters = id, nil, in.Device.String(), "", nil
	return one
}

// unitParallel is how many of a unit's rules are written at once: a GPU of 7-profile MIG is ten
// rules, and one at a time they cost ten apiserver round trips in a row (see BENCHMARKS.md).
const unitParallel = 8

// quarantineUnit fences every device of the unit, unitParallel rules at a time; it fails if any
// rule could not be made, and a retry makes only what is missing. The result names the first
// device's rule.
func (v ruleWriter) quarantineUnit(ctx context.Context, in QuarantineInput) (QuarantineResult, error) {
	a := v.a
	ids := memberIDs(in.Device, in.Members)
	results := make([]QuarantineResult, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(unitParallel)
	for i, id := range ids {
		g.Go(func() error {
			r, err := a.Quarantine(gctx, in.member(id))
			if err != nil {
				return unitError("fence", id, in.Device, err)
			}
			results[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return QuarantineResult{}, err
	}
	res := results[0]
	for _, r := range results {
		res.Created = res.Created || r.Created
	}
	if in.Decision != "" {
		in.Reason = fmt.Sprintf("physical device %s (%d forms: %s): %s", in.Device, len(in.Members), strings.Join(in.Members, ", "), in.Reason)
		a.decisionEvents(ctx, in, res.RuleName, a.effect(in.Effect))
	}
	return res, nil
}

// unitError names the device and unit of a failed call; a non-retryable error stays one.
func unitError(what string, id, unit device.ID, err error) error {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return err
	}
	return fmt.Errorf("%s %s of unit %s: %w", what, id.Device, unit, err)
}

// inspectUnit reads every device's rule. The unit's fence stands while any rule does: the answer
// is the first rule that no longer fences (deleted by someone, edited), else the first one, and
// Missing lists the devices with no rule, which the workflow fences again. With no rule at all,
// the fence is gone.
func (v ruleWriter) inspectUnit(ctx context.Context, in InspectInput) (decide.RuleInfo, error) {
	a := v.a
	var first, broken *decide.RuleInfo
	var missing []string
	for _, id := range memberIDs(in.Device, in.Members) {
		info, err := a.InspectRule(ctx, InspectInput{Device: id, Effect: in.Effect})
		if err != nil {
			return decide.RuleInfo{}, unitError("inspect the rule of", id, in.Device, err)
		}
		if !info.Present {
			missing = append(missing, id.Device)
			continue
		}
		if first == nil {
			first = &info
		}
		if broken == nil && !info.InForce() {
			broken = &info
		}
	}
	if first == nil {
		return decide.RuleInfo{Name: in.Device.String(), WantEffect: string(a.effect(resourcev1.DeviceTaintEffect(in.Effect)))}, nil
	}
	out := *first
	if broken != nil {
		out = *broken
	}
	out.Missing = missing
	return out, nil
}

// refreshUnit rewrites every device's rule, and makes the rule of a device that has none while
// others stand (it joined the unit after the fence). Only when no rule stands is the fence missing.
func (v ruleWriter) refreshUnit(ctx context.Context, in QuarantineInput) (RefreshResult, error) {
	a := v.a
	var res RefreshResult
	var missing []device.ID
	for _, id := range memberIDs(in.Device, in.Members) {
		r, err := a.RefreshRule(ctx, in.member(id))
		if err != nil {
			return RefreshResult{}, unitError("refresh the rule of", id, in.Device, err)
		}
		if r.Missing {
			missing = append(missing, id)
			continue
		}
		res.Effect = r.Effect
	}
	if len(missing) == len(in.Members) {
		return RefreshResult{Missing: true}, nil
	}
	for _, id := range missing {
		if _, err := a.Quarantine(ctx, in.member(id)); err != nil && !apierrors.IsAlreadyExists(err) {
			return RefreshResult{}, unitError("fence", id, in.Device, err)
		}
	}
	return res, nil
}

// unitLabel is the kubeobj.LabelUnit value of a unit: its ID's hash (an ID holds '=' and '/').
func unitLabel(unit string) string {
	sum := sha256.Sum256([]byte(unit))
	return hex.EncodeToString(sum[:])[:32]
}

// releaseUnitRules deletes every rule of the unit's forms: the members', and any other that
// names the unit, such as the rule of a form a reconfiguration withdrew after a fence whose
// result was lost. Each is deleted only if it is DeviceWarden's, names exactly this unit and is
// owned by wf, the unit's workflow (deleteOwnRule).
func (v ruleWriter) releaseUnitRules(ctx context.Context, unit device.ID, members []string, wf string) error {
	a := v.a
	for _, id := range memberIDs(unit, members) {
		if err := v.deleteOwnRule(ctx, id, wf); err != nil {
			return unitError("release", id, unit, err)
		}
	}
	rules, err := a.Kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{
		LabelSelector: kubeobj.LabelManagedBy + "=" + kubeobj.ManagedBy + "," + kubeobj.LabelUnit + "=" + unitLabel(unit.String())})
	if err != nil {
		return fmt.Errorf("list the rules of unit %s: %w", unit, err)
	}
	for _, r := range rules.Items {
		if r.Annotations[kubeobj.AnnotationUnit] != unit.String() || r.Spec.DeviceSelector == nil || r.Spec.DeviceSelector.Device == nil {
			continue
		}
		id := device.ID{Driver: unit.Driver, Pool: unit.Pool, Device: *r.Spec.DeviceSelector.Device}
		if err := v.deleteOwnRule(ctx, id, wf); err != nil {
			return unitError("release", id, unit, err)
		}
	}
	return nil
}
