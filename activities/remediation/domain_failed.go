package remediation

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// A reset that failed leaves its domain's other devices in a state nobody checked: the reset
// reached them too. Each is reported Unhealthy by a DeviceHealthReport of DeviceWarden's own
// (healthreport.OwnSource, cause code healthreport.CodeResetFailed), which the watcher delivers like any
// detector's: the device's own workflow quarantines it through the breaker, and its own review
// gives it back. Its domain fence stays until that quarantine's fence stands, so no claim lands
// on it in between; one whose quarantine has not come within Activities.PeerWait keeps its domain fence
// until the resetting device's quarantine ends.

// defaultPeerWait bounds how long a failed reset waits for its peers' own quarantines.
const defaultPeerWait = 45 * time.Second

var reportResource = schema.GroupVersionResource{Group: healthreport.Group, Version: healthreport.Version, Resource: healthreport.Resource}

// resetFailedPeers reports each of peers that no quarantine of its own fences yet, waits for
// their quarantines, and lifts each one's domain fence once its own fence stands. The peers
// still unfenced by their own quarantine at the end are returned: their domain fences stay.
func (v domains) resetFailedPeers(ctx context.Context, in CheckInput, node string, peers []device.ID, res decide.StepResult) []device.ID {
	a := v.a
	waiting := map[device.ID]bool{}
	for _, p := range peers {
		if v.fencedByOwn(ctx, p) {
			v.unfencePeer(ctx, p, in.WorkflowID)
			continue
		}
		if err := v.reportPeer(ctx, in, p, res); err != nil {
			slog.Default().WarnContext(ctx, "a device the failed reset reached stays fenced by its domain fence", "device", p.String(), "error", err)
		}
		waiting[p] = true
	}
	if len(waiting) > 0 {
		a.event(ctx, corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node}, "DomainResetFailed", corev1.EventTypeWarning,
			fmt.Sprintf("the reset of %s failed (%s); it reached %d other devices of its reset domain %s: each is reported Unhealthy (cause %s) and quarantined by its own workflow",
				in.Device, res.Reason, len(waiting), in.Domain, healthreport.CodeResetFailed), node+".reset-failed."+nameHash(in.WorkflowID+in.TryAt.String()))
	}
	beat := a.CheckPoll
	if beat <= 0 {
		beat = 2 * time.Second
	}
	until := time.Now().Add(cmp.Or(a.PeerWait, defaultPeerWait))
	if d := activity.GetInfo(ctx).Deadline; !d.IsZero() && d.Add(-5*time.Second).Before(until) {
		until = d.Add(-5 * time.Second)
	}
	for len(waiting) > 0 && time.Now().Before(until) {
		activity.RecordHeartbeat(ctx, "the reset's domain: waiting for its devices' quarantines")
		time.Sleep(min(beat, time.Until(until)))
		for p := range waiting {
			if v.fencedByOwn(ctx, p) {
				v.unfencePeer(ctx, p, in.WorkflowID)
				delete(waiting, p)
			}
		}
	}
	var left []device.ID
	for _, p := range peers {
		if waiting[p] {
			left = append(left, p)
		}
	}
	return left
}

// reportPeer writes the DeviceHealthReport that says the failed reset reached p. Its name is the
// try's, so an attempt taken again finds it written.
func (v domains) reportPeer(ctx context.Context, in CheckInput, p device.ID, res decide.StepResult) error {
	a := v.a
	msg := fmt.Sprintf("the reset of %s (its reset domain %s) failed and reached this device: %s", in.Device, in.Domain, res.Reason)
	if len(msg) > healthreport.MaxMessage {
		msg = msg[:healthreport.MaxMessage]
	}
	now := metav1.Now()
	spec := healthreport.Spec{Device: &healthreport.DeviceRef{Driver: p.Driver, Pool: p.Pool, Name: p.Device}, Health: string(device.Unhealthy),
		Cause: healthreport.Cause{Code: healthreport.CodeResetFailed}, Message: msg, Source: healthreport.OwnSource, ObservedTime: &now}
	obj, err := spec.Object("devicewarden-reset-" + nameHash(p.String()+"|"+in.WorkflowID+"|"+in.TryAt.UTC().Format(time.RFC3339Nano)))
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetLabels(map[string]string{kubeobj.LabelDriver: kubeobj.LabelValue(p.Driver), kubeobj.LabelPool: kubeobj.LabelValue(p.Pool)})
	u.SetAnnotations(map[string]string{kubeobj.AnnotationWorkflow: in.WorkflowID, kubeobj.AnnotationDevice: p.String()})
	dyn, err := a.objects()
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(reportResource).Create(ctx, u, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("report %s reached by the failed reset of %s: %w", p, in.Device, err)
	}
	return nil
}

// fencedByOwn says whether p's own quarantine rule stands.
func (v domains) fencedByOwn(ctx context.Context, p device.ID) bool {
	a := v.a
	r, err := a.Kube.ResourceV1().DeviceTaintRules().Get(ctx, p.TaintRuleName(), metav1.GetOptions{})
	return err == nil && r.Annotations[kubeobj.AnnotationDevice] == p.String()
}

// unfencePeer deletes p's domain fence if workflowID's reset made it.
func (v domains) unfencePeer(ctx context.Context, p device.ID, workflowID string) {
	a := v.a
	rules := a.Kube.ResourceV1().DeviceTaintRules()
	r, err := rules.Get(ctx, domainFenceName(p), metav1.GetOptions{})
	if err == nil && r.Annotations[kubeobj.AnnotationWorkflow] == workflowID {
		err = rules.Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &r.ResourceVersion}})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		slog.Default().WarnContext(ctx, "the domain fence stays until the reset's quarantine ends", "device", p.String(), "error", err)
	}
}

// nameHash is a short, stable hash for object names.
func nameHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}
