package remediation

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// A DeviceTaintRule has one owning workflow, named in its workflow annotation: only the owner
// changes its taint, and only the owner's release removes it. A device can be fenced by two
// workflows at once (a partition's own, from before its GPU's unit was known or while its slices
// are gone, and the unit's): the second finds the rule owned and waits on it instead of taking it
// over. When the owner releases, the rule is handed to the first workflow waiting, so a device
// stays fenced while any workflow says it is, and no workflow lifts another's fence.

// owner is the workflow that owns a rule; empty for a rule written before owners were kept,
// which any DeviceWarden workflow may act on.
func owner(r *resourcev1.DeviceTaintRule) string {
	return r.Annotations[kubeobj.AnnotationWorkflow]
}

// ownedBy says whether the workflow wf owns r (or r predates owners, or wf is unnamed: a caller
// from before owners were kept).
func ownedBy(r *resourcev1.DeviceTaintRule, wf string) bool {
	o := owner(r)
	return o == "" || wf == "" || o == wf
}

// waiting lists the workflows waiting on a rule, oldest first.
func waiting(r *resourcev1.DeviceTaintRule) []string {
	v := r.Annotations[kubeobj.AnnotationWaiting]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// setWaiting writes the waiting list.
func setWaiting(r *resourcev1.DeviceTaintRule, wfs []string) {
	if len(wfs) == 0 {
		delete(r.Annotations, kubeobj.AnnotationWaiting)
		return
	}
	r.Annotations[kubeobj.AnnotationWaiting] = strings.Join(wfs, ",")
}

// withWaiter is a copy of r with wf added to its waiting list, or nil when wf waits already.
func withWaiter(r *resourcev1.DeviceTaintRule, wf string) *resourcev1.DeviceTaintRule {
	w := waiting(r)
	if slices.Contains(w, wf) {
		return nil
	}
	out := r.DeepCopy()
	setWaiting(out, append(w, wf))
	return out
}

// handedOn is r as its release by owner leaves it: handed to the first workflow waiting (nil
// when none waits, and the rule is deleted).
func handedOn(r *resourcev1.DeviceTaintRule, now time.Time) *resourcev1.DeviceTaintRule {
	w := waiting(r)
	if len(w) == 0 {
		return nil
	}
	out := r.DeepCopy()
	out.Annotations[kubeobj.AnnotationHandedOver] = owner(r) + " at " + now.UTC().Format(time.RFC3339)
	out.Annotations[kubeobj.AnnotationWorkflow] = w[0]
	setWaiting(out, w[1:])
	return out
}

// withoutWaiter is a copy of r without wf on its waiting list, or nil when wf does not wait.
func withoutWaiter(r *resourcev1.DeviceTaintRule, wf string) *resourcev1.DeviceTaintRule {
	w := waiting(r)
	i := slices.Index(w, wf)
	if i < 0 {
		return nil
	}
	out := r.DeepCopy()
	setWaiting(out, slices.Delete(w, i, i+1))
	return out
}

// waitOn puts workflow wf on the waiting list of r, another workflow's rule, unless it waits already.
func (v ruleWriter) waitOn(ctx context.Context, r *resourcev1.DeviceTaintRule, wf string) error {
	a := v.a
	w := withWaiter(r, wf)
	if w == nil {
		return nil
	}
	_, err := a.Kube.ResourceV1().DeviceTaintRules().Update(ctx, w, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager})
	return err
}

// handOver writes a rule its owner releases with workflows waiting: the first becomes its owner.
func (v ruleWriter) handOver(ctx context.Context, r, next *resourcev1.DeviceTaintRule) error {
	a := v.a
	if _, err := a.Kube.ResourceV1().DeviceTaintRules().Update(ctx, next, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
		return fmt.Errorf("hand device taint rule %s to %s: %w", r.Name, owner(next), err)
	}
	msg := fmt.Sprintf("DeviceTaintRule %s released by %s and handed to %s, which still fences %s", r.Name, owner(r), owner(next), r.Annotations[kubeobj.AnnotationDevice])
	slog.Default().InfoContext(ctx, "device taint rule handed over", "rule", r.Name, "from", owner(r), "to", owner(next))
	a.event(ctx, corev1.ObjectReference{Kind: "DeviceTaintRule", APIVersion: "resource.k8s.io/v1", Name: r.Name, UID: r.UID},
		"DeviceTaintRuleHandedOver", corev1.EventTypeNormal, msg, fmt.Sprintf("%s.handed-over.%d", r.Name, time.Now().Unix()))
	return nil
}
