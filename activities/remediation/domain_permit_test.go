package remediation

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

var gpu4 = device.ID{Driver: gpu3.Driver, Pool: gpu3.Pool, Device: "gpu-4"}

// takeDomainOf runs takeDomain for gpu-3's try (its fault left unmended since since) with the
// domain's Lease as given (nil: none).
func takeDomainOf(t *testing.T, since time.Time, lease *coordinationv1.Lease) (decide.StepResult, bool, *coordinationv1.Lease) {
	t.Helper()
	env, a, kube := activityEnv(t)
	a.CheckPoll = 20 * time.Millisecond
	p := (domains{a}).permitOf("node-1")
	if lease != nil {
		lease.Name, lease.Namespace = p.name, p.ns
		if _, err := kube.CoordinationV1().Leases(p.ns).Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	in := checkIn(decide.ActRepair)
	in.Since, in.Check.Timeout = since, policy.JSONDuration(200*time.Millisecond)
	var joined bool
	env.RegisterActivityWithOptions(func(ctx context.Context, in CheckInput) (decide.StepResult, error) {
		res, j, err := (domains{a}).takeDomain(ctx, in, p)
		joined = j
		return res, err
	}, activity.RegisterOptions{Name: "TakeDomain"})
	v, err := env.ExecuteActivity("TakeDomain", in)
	var res decide.StepResult
	if err == nil {
		err = v.Get(&res)
	}
	if err != nil {
		t.Fatal(err)
	}
	after, _ := kube.CoordinationV1().Leases(p.ns).Get(context.Background(), p.name, metav1.GetOptions{})
	return res, joined, after
}

// otherReset is gpu-4's reset of the domain: started at started, ended with outcome ("" : running).
func otherReset(started time.Time, outcome string) *coordinationv1.Lease {
	now := time.Now()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		kubeobj.AnnotationDevice: gpu4.String(), annotationResetStarted: started.UTC().Format(time.RFC3339Nano)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(gpu4.WorkflowID()), LeaseDurationSeconds: ptr.To(int32(600)), RenewTime: &metav1.MicroTime{Time: now}}}
	if outcome != "" {
		l.Annotations[annotationResetOutcome], l.Annotations[annotationResetReason] = outcome, "exited 0, device Healthy"
	}
	return l
}

func TestAFreeDomainIsTaken(t *testing.T) {
	res, joined, l := takeDomainOf(t, time.Now(), nil)
	if joined || res.Busy || l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != gpu3.WorkflowID() {
		t.Fatalf("joined %t result %+v lease %+v", joined, res, l)
	}
}

// Another device's reset of the domain that started after this device's fault and passed is
// this device's reset too: joined, passed, and no reset of its own.
func TestAResetThatStartedSinceTheFaultIsJoined(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	res, joined, _ := takeDomainOf(t, since, otherReset(since.Add(time.Second), resultPassed))
	if !joined || !res.Passed || res.Joined != gpu4.String() || !strings.Contains(res.Reason, "reset with "+gpu4.String()) {
		t.Fatalf("joined %t result %+v", joined, res)
	}
	res, joined, _ = takeDomainOf(t, since, otherReset(since.Add(time.Second), resultFailed))
	if !joined || res.Passed || res.Joined != gpu4.String() {
		t.Fatalf("a failed domain reset: joined %t result %+v", joined, res)
	}
}

// One that started before the fault was left unmended did not mend it: the permit is taken over.
func TestAResetBeforeTheFaultIsNotJoined(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	res, joined, l := takeDomainOf(t, since, otherReset(since.Add(-time.Second), resultPassed))
	if joined || res.Busy || ptr.Deref(l.Spec.HolderIdentity, "") != gpu3.WorkflowID() || l.Annotations[annotationResetOutcome] != "" {
		t.Fatalf("joined %t result %+v lease %+v", joined, res, l)
	}
}

// One still running is waited for: within the check's timeout it did not end, so the try is
// busy (it joins on a later look); the Lease stays the other's.
func TestARunningResetIsWaitedFor(t *testing.T) {
	res, joined, l := takeDomainOf(t, time.Now().Add(-time.Minute), otherReset(time.Now(), ""))
	if !joined || !res.Busy || !strings.Contains(res.Reason, "is under way: this device's joins it") || ptr.Deref(l.Spec.HolderIdentity, "") != gpu4.WorkflowID() {
		t.Fatalf("joined %t result %+v lease %+v", joined, res, l)
	}
}

// A holder that stopped renewing its permit (its worker died, its quarantine ended unseen) loses it.
func TestAnExpiredPermitIsTakenOver(t *testing.T) {
	old := otherReset(time.Now().Add(-time.Hour), "")
	old.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-time.Hour)}
	res, joined, l := takeDomainOf(t, time.Now().Add(-time.Minute), old)
	if joined || res.Busy || ptr.Deref(l.Spec.HolderIdentity, "") != gpu3.WorkflowID() {
		t.Fatalf("joined %t result %+v lease %+v", joined, res, l)
	}
}
