package remediation

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	coordinationv1 "k8s.io/api/coordination/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// One reset per domain. A reset that reaches other devices holds its domain's permit: a Lease in
// DeviceWarden's namespace named by the domain (its node and attribute value), held by the
// resetting workflow. Another device of the domain whose reset comes while it stands joins it
// rather than resetting the domain a second time: it waits for that reset to end and takes its
// outcome as its own step's. The Lease records when the reset started and how it ended, and stays
// a while after (domainRecordKeep), so a joiner that looks late still reads it.

// Annotations of a domain's reset Lease.
const (
	annotationResetStarted = "devicewarden.io/reset-started"
	annotationResetOutcome = kubeobj.AnnotationResetOutcome // passed or failed
	annotationResetReason  = "devicewarden.io/reset-reason"
)

// domainRecordKeep is how long an ended reset's Lease stays readable for the joiners.
const domainRecordKeep = 10 * time.Minute

// domainPermit is the Lease of one domain's reset.
type domainPermit struct {
	name, ns, key string
}

// domainKey names the domain a reset of id reaches: its node and, for an attribute domain, the
// value id publishes. Empty when the reset reaches id alone.
func domainKey(published []resourcev1.ResourceSlice, id device.ID, domain string) string {
	if domain == "" || domain == policy.DomainDevice {
		return ""
	}
	attr, byAttr := policy.DomainAttribute(domain)
	for _, s := range published {
		if s.Spec.Pool.Name != id.Pool {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name != id.Device {
				continue
			}
			node := ptr.Deref(s.Spec.NodeName, "pool:"+id.Pool)
			if !byAttr {
				return node
			}
			if v, ok := attrValue(d, id.Driver, attr); ok {
				return node + "/" + attr + "=" + v
			}
		}
	}
	return ""
}

func (v domains) permitOf(key string) domainPermit {
	a := v.a
	return domainPermit{name: kubeobj.ResetPermitPrefix + nameHash(key), ns: kubeobj.Own(a.OwnNamespace), key: key}
}

// takeDomain takes the domain's reset permit for in's try, or joins the reset that holds it.
// joined is set with the step's answer when this try joined another device's reset (its outcome)
// or waits for one to end (Busy); else the permit is this try's.
func (v domains) takeDomain(ctx context.Context, in CheckInput, p domainPermit) (res decide.StepResult, joined bool, err error) {
	a := v.a
	leases := a.Kube.CoordinationV1().Leases(p.ns)
	deadline := time.Now().Add(in.Check.Timeout.D())
	poll := a.CheckPoll
	if poll <= 0 || poll > time.Second {
		poll = time.Second
	}
	for {
		l, err := leases.Get(ctx, p.name, metav1.GetOptions{})
		now := time.Now()
		switch {
		case apierrors.IsNotFound(err):
			l = v.permitLease(in, p, now)
			if _, err := leases.Create(ctx, l, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err == nil {
				return decide.StepResult{}, false, nil
			} else if !apierrors.IsAlreadyExists(err) {
				return decide.StepResult{}, false, fmt.Errorf("take the reset permit of domain %s: %w", p.key, err)
			}
			continue
		case err != nil:
			return decide.StepResult{}, false, fmt.Errorf("read the reset permit of domain %s: %w", p.key, err)
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		other := l.Annotations[kubeobj.AnnotationDevice]
		started, _ := time.Parse(time.RFC3339Nano, l.Annotations[annotationResetStarted])
		outcome := l.Annotations[annotationResetOutcome]
		switch {
		case holder == in.WorkflowID && outcome == "":
			// This device's own (an attempt before this one, or a try moving its holders, took
			// it): renewed, and kept.
			l.Spec.RenewTime = &metav1.MicroTime{Time: now}
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsConflict(err) {
				return decide.StepResult{}, false, fmt.Errorf("renew the reset permit of domain %s: %w", p.key, err)
			}
			return decide.StepResult{}, false, nil
		case outcome != "" && !started.IsZero() && started.After(in.Since) && holder != in.WorkflowID:
			// Another device's reset of the domain started after this device's fault was last
			// left unmended, and ended: it reset this device too.
			a.countTry(in.Step, "joined")
			return decide.StepResult{Passed: outcome == resultPassed, At: now, Joined: other,
				Reason: fmt.Sprintf("reset with %s's reset of their domain (%s), started %s: %s", other, p.key, started.UTC().Format(time.RFC3339), l.Annotations[annotationResetReason])}, true, nil
		case outcome != "" || kubeobj.LeaseExpired(l, now):
			// Ended before this device's fault was left unmended (its reset did not mend it), or
			// its holder is gone: the permit is free.
			fresh := v.permitLease(in, p, now)
			fresh.ResourceVersion = l.ResourceVersion
			if _, err := leases.Update(ctx, fresh, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager}); err == nil {
				return decide.StepResult{}, false, nil
			} else if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return decide.StepResult{}, false, fmt.Errorf("take the reset permit of domain %s: %w", p.key, err)
			}
			continue
		}
		// Another device's reset of the domain is waiting for its holders or running: wait for
		// it to end, and join it.
		if !now.Before(deadline) {
			a.countTry(in.Step, "busy")
			return decide.StepResult{Busy: true, At: now, Reason: fmt.Sprintf("%s's reset of their domain (%s) is under way: this device's joins it", other, p.key)}, true, nil
		}
		activity.RecordHeartbeat(ctx, "joining "+other+"'s reset of "+p.key)
		select {
		case <-ctx.Done():
			return decide.StepResult{}, false, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// permitLease is the domain's Lease held by in's try from now, for as long as its reset may run.
func (v domains) permitLease(in CheckInput, p domainPermit, now time.Time) *coordinationv1.Lease {
	hold := int32((in.Check.Timeout.D() + 2*time.Minute) / time.Second)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns,
			Labels:      map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy},
			Annotations: map[string]string{kubeobj.AnnotationDevice: in.Device.String(), kubeobj.AnnotationWorkflow: in.WorkflowID, kubeobj.AnnotationReason: "reset of domain " + p.key}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(in.WorkflowID), LeaseDurationSeconds: ptr.To(hold),
			AcquireTime: &metav1.MicroTime{Time: now}, RenewTime: &metav1.MicroTime{Time: now}},
	}
}

// markDomain writes on the domain's permit that this try's reset started (outcome "") or how it
// ended; an ended one stays domainRecordKeep for the joiners. A permit another try took over is
// left alone.
func (v domains) markDomain(ctx context.Context, in CheckInput, p domainPermit, started time.Time, res *decide.StepResult) error {
	a := v.a
	leases := a.Kube.CoordinationV1().Leases(p.ns)
	l, err := leases.Get(ctx, p.name, metav1.GetOptions{})
	if err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != in.WorkflowID {
		return err
	}
	now := time.Now()
	l.Annotations[annotationResetStarted] = started.UTC().Format(time.RFC3339Nano)
	if res != nil {
		outcome := resultFailed
		if res.Passed {
			outcome = resultPassed
		}
		l.Annotations[annotationResetOutcome], l.Annotations[annotationResetReason] = outcome, res.Reason
		l.Spec.LeaseDurationSeconds = ptr.To(int32(domainRecordKeep / time.Second))
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager})
	return err
}

// dropDomain gives the permit back unused: this try ran no reset (it waits for holders, or its
// tool never ran).
func (v domains) dropDomain(ctx context.Context, in CheckInput, p domainPermit) error {
	a := v.a
	leases := a.Kube.CoordinationV1().Leases(p.ns)
	l, err := leases.Get(ctx, p.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && (ptr.Deref(l.Spec.HolderIdentity, "") != in.WorkflowID || l.Annotations[annotationResetOutcome] != "") {
		return nil
	}
	if err != nil {
		return err
	}
	err = leases.Delete(ctx, p.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// endDomain ends this try's hold of the domain's permit: a reset that ran (started is when this
// attempt began it) records its outcome for the joiners; one that did not (it waits for holders, its tool never ran, it failed outright)
// gives the permit back. A failure is only logged: the permit lasts its hold at most.
func (v domains) endDomain(ctx context.Context, in CheckInput, p domainPermit, started time.Time, res decide.StepResult, err error) {
	var werr error
	if err == nil && !res.Busy && !res.NotRun && !started.IsZero() {
		werr = v.markDomain(ctx, in, p, started, &res)
	} else {
		werr = v.dropDomain(ctx, in, p)
	}
	if werr != nil {
		activity.GetLogger(ctx).Warn("the reset permit of the domain lasts its hold", "domain", p.key, "error", werr)
	}
}

// freeDomainPermits gives back the domain permits workflowID holds for a reset that has not run:
// its quarantine ended while the reset moved its domain's holders. Without this the domain's
// other devices would wait for the permit to lapse. A failure is only logged: the permit lasts its
// hold at most.
func (v domains) freeDomainPermits(ctx context.Context, workflowID string) {
	a := v.a
	leases := a.Kube.CoordinationV1().Leases(kubeobj.Own(a.OwnNamespace))
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: kubeobj.LabelManagedBy + "=" + kubeobj.ManagedBy})
	if err == nil {
		for _, l := range list.Items {
			if ptr.Deref(l.Spec.HolderIdentity, "") != workflowID || l.Annotations[annotationResetOutcome] != "" || l.Annotations[annotationResetStarted] != "" {
				continue
			}
			err = leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				err = nil
			}
		}
	}
	if err != nil {
		slog.Default().WarnContext(ctx, "a domain's reset permit lasts its hold", "workflow", workflowID, "error", err)
	}
}
