package remediation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// A repair step runs as a check does (RunCheck with kind decide.ActRepair): a Pod with a claim
// only the device satisfies, tolerating its quarantine, keyed by device and try, its outcome read
// from the Pod. This file keeps what a retired device leaves behind.

// settleWait bounds how long a repair step waits for a claim no Pod uses any more to be
// deallocated (the claim controller does it moments after its last Pod is gone).
const settleWait = 30 * time.Second

// idleOrHeld names a claim, other than own ("<namespace>/<name>"), that is allocated one of the
// devices ("" when none is): a reset must never run under a workload, so the watcher's word that
// no Pod holds the device is checked against the claims themselves. A claim allocated the device
// with no live Pod reserving it (its Pod just ended) is waited for, up to settleWait: the device
// is about to be idle, and a step put off now would look again only after RepairRetry, a minute.
func (v checkPods) idleOrHeld(ctx context.Context, devices []device.ID, own string) (string, error) {
	a := v.a
	poll := a.CheckPoll
	if poll <= 0 || poll > time.Second {
		poll = 500 * time.Millisecond
	}
	wait := a.SettleWait
	if wait <= 0 {
		wait = settleWait
	}
	deadline := time.Now().Add(wait)
	for {
		held, reserved, err := v.holder(ctx, devices, own)
		if err != nil || held == "" || reserved || !time.Now().Before(deadline) {
			return held, err
		}
		activity.RecordHeartbeat(ctx, "waiting for "+held+" to be deallocated")
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(poll):
		}
	}
}

// holder names a claim idleOrHeld looks for, and says whether a Pod reserves it.
func (v checkPods) holder(ctx context.Context, devices []device.ID, own string) (held string, reserved bool, err error) {
	err = v.claimsOn(ctx, devices, own, func(c resourcev1.ResourceClaim, id device.ID) bool {
		held, reserved = fmt.Sprintf("claim %s/%s is still allocated %s", c.Namespace, c.Name, id), v.inUse(ctx, c)
		return false
	})
	return held, reserved, err
}

// claimedAny says whether a claim other than own is allocated one of the devices.
func (v checkPods) claimedAny(ctx context.Context, devices []device.ID, own string) (bool, error) {
	found := false
	err := v.claimsOn(ctx, devices, own, func(resourcev1.ResourceClaim, device.ID) bool {
		found = true
		return false
	})
	return found, err
}

// claimsOn calls each for every claim other than own ("<namespace>/<name>") allocated one of the
// devices, with the first such device, until each returns false.
func (v checkPods) claimsOn(ctx context.Context, devices []device.ID, own string, each func(resourcev1.ResourceClaim, device.ID) bool) error {
	a := v.a
	if len(devices) == 0 {
		return nil
	}
	want := map[device.ID]bool{}
	for _, d := range devices {
		want[d] = true
	}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := a.Kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list resource claims: %w", err)
		}
		for _, c := range list.Items {
			if c.Status.Allocation == nil || c.Namespace+"/"+c.Name == own {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if id := (device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}); want[id] {
					if !each(c, id) {
						return nil
					}
					break
				}
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return nil
		}
	}
}

// inUse says whether a live Pod reserves the claim: one that exists, is not being deleted and has
// not ended. A claim whose Pods are gone waits a moment for the claim controller to release it.
func (v checkPods) inUse(ctx context.Context, c resourcev1.ResourceClaim) bool {
	a := v.a
	for _, r := range c.Status.ReservedFor {
		if r.Resource != "pods" {
			return true // another kind of consumer: its own lifecycle
		}
		p, err := a.Kube.CoreV1().Pods(c.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return true // cannot tell: a reset must not run under a workload
		}
		if err == nil && p.UID == r.UID && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true
		}
	}
	return false
}

// tryEvent records a repair step's outcome as an Event on the device's node, once per try: the
// Event is named from the workflow, the try and when it began, so a relapse's try 1 is not taken
// for the last quarantine's.
func (v checkPods) tryEvent(ctx context.Context, node, step string, id device.ID, workflowID string, try int, tryAt time.Time, res decide.StepResult) {
	a := v.a
	if node == "" {
		return
	}
	typ, outcome := corev1.EventTypeWarning, "failed"
	if res.Passed {
		typ, outcome = corev1.EventTypeNormal, "passed"
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d/%s", workflowID, try, tryAt.UTC().Format(time.RFC3339Nano))))
	a.event(ctx, corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node}, kubeobj.EventRepairTry, typ,
		fmt.Sprintf("repair step %s (try %d) on %s %s: %s", step, try, id, outcome, res.Reason), node+".repair."+hex.EncodeToString(sum[:8]))
}

// RetireInput asks to keep a retired device's evidence.
type RetireInput struct {
	Device     device.ID         `json:"device"`
	Node       string            `json:"node"`
	WorkflowID string            `json:"workflowID"`
	Reason     string            `json:"reason"`
	Evidence   map[string]string `json:"evidence"`
}

// RecordRetirement writes the device's evidence bundle, a ConfigMap in DeviceWarden's namespace,
// and a Warning Event on it that says to replace the device. A device retired again (released by
// a person, failed later) gets its bundle rewritten: the newest retirement is the one to act on.
func (a *Activities) RecordRetirement(ctx context.Context, in RetireInput) (string, error) {
	ns, name := kubeobj.Own(a.OwnNamespace), kubeobj.RetiredName(in.Device)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, kubeobj.LabelRetired: "true", kubeobj.LabelDevice: kubeobj.LabelValue(in.Device.Device)},
			Annotations: map[string]string{kubeobj.AnnotationDevice: in.Device.String(), kubeobj.AnnotationWorkflow: in.WorkflowID}},
		Data: in.Evidence,
	}
	cms := a.Kube.CoreV1().ConfigMaps(ns)
	old, err := cms.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create evidence %s/%s: %w", ns, name, err)
		}
	case err != nil:
		return "", fmt.Errorf("get evidence %s/%s: %w", ns, name, err)
	default:
		cm.ResourceVersion = old.ResourceVersion
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
			return "", fmt.Errorf("update evidence %s/%s: %w", ns, name, err)
		}
	}
	if a.Metrics != nil {
		a.Metrics.Retired.Inc()
	}
	msg := fmt.Sprintf("device %s on node %s retired: %s; replace it (evidence in ConfigMap %s/%s)", in.Device, in.Node, in.Reason, ns, name)
	// One Event per retirement: a device retired again (a later quarantine) gets one of its own.
	sum := sha256.Sum256([]byte(in.Evidence["quarantined"] + "/" + in.Reason))
	a.event(ctx, corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ns, Name: name}, "DeviceRetired", corev1.EventTypeWarning, msg,
		name+".retired."+hex.EncodeToString(sum[:6]))
	return name, nil
}
