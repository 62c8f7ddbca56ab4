package migration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// LabelEvidence marks the ConfigMaps that keep a workload's evidence.
const LabelEvidence = "devicewarden.io/evidence"

// maxEvidence keeps an evidence ConfigMap well under the API's 1 MiB object limit.
const maxEvidence = 900 << 10

// EvidenceInput asks to keep what shows why a workload could not be moved.
type EvidenceInput struct {
	WorkflowID string       `json:"workflowID"`
	Device     device.ID    `json:"device"`
	Workload   api.Workload `json:"workload"`
	// Report is the health report that quarantined the device, as the workflow recorded it.
	Report string `json:"report"`
	// Keep is how long the evidence is kept (an annotation a person or a cleanup job reads).
	Keep time.Duration `json:"keep"`
}

// EvidenceName is the ConfigMap that keeps one migration's evidence.
func EvidenceName(workflowID string) string {
	sum := sha256.Sum256([]byte(workflowID))
	return "devicewarden-evidence-" + hex.EncodeToString(sum[:8])
}

// PreserveEvidence writes the workload's Pods, their ResourceClaims, their recent Events and the
// report into a ConfigMap in DeviceWarden's namespace, named after the migration and owned by
// nothing, so it outlives the workload. A ConfigMap already there is kept: the first evidence is
// the one that matters, and a retried activity writes nothing twice.
func (a *Activities) PreserveEvidence(ctx context.Context, in EvidenceInput) (string, error) {
	name := EvidenceName(in.WorkflowID)
	cms := a.Kube.CoreV1().ConfigMaps(a.ownNamespace())
	if _, err := cms.Get(ctx, name, metav1.GetOptions{}); err == nil {
		return name, nil
	} else if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("get evidence %s: %w", name, err)
	}
	data := map[string]string{"report": in.Report, "device": in.Device.String(),
		"workload": fmt.Sprintf("%s %s/%s (uid %s)", in.Workload.Kind, in.Workload.Namespace, in.Workload.Name, in.Workload.UID)}
	ns := in.Workload.Namespace
	var events []string
	for _, podName := range in.Workload.Pods {
		pod, err := a.Kube.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			data["pod-"+podName+".json"] = "gone before the evidence was taken"
			continue
		}
		if err != nil {
			return "", fmt.Errorf("get pod %s/%s for evidence: %w", ns, podName, err)
		}
		pod.ManagedFields = nil
		data["pod-"+podName+".json"] = asJSON(pod)
		for _, cs := range pod.Status.ResourceClaimStatuses {
			if cs.ResourceClaimName == nil {
				continue
			}
			claim, err := a.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, *cs.ResourceClaimName, metav1.GetOptions{})
			if err == nil {
				claim.ManagedFields = nil
				data["claim-"+claim.Name+".json"] = asJSON(claim)
			}
		}
		evs, err := a.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + podName})
		if err != nil {
			return "", fmt.Errorf("list events of pod %s/%s for evidence: %w", ns, podName, err)
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name != podName {
				continue // a client that ignores the field selector
			}
			events = append(events, eventLine(e))
		}
	}
	sort.Strings(events)
	data["events.txt"] = strings.Join(events, "\n")
	trim(data)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, LabelEvidence: "true",
			kubeobj.LabelWorkloadNamespace: kubeobj.LabelValue(ns), kubeobj.LabelWorkloadName: kubeobj.LabelValue(in.Workload.Name), kubeobj.LabelDevice: kubeobj.LabelValue(in.Device.Device)},
			Annotations: map[string]string{kubeobj.AnnotationWorkflow: in.WorkflowID, kubeobj.AnnotationDevice: in.Device.String(),
				kubeobj.AnnotationExpiresAt: time.Now().Add(in.Keep).UTC().Format(time.RFC3339)}},
		Data: data,
	}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create evidence %s: %w", name, err)
	}
	return name, nil
}

func asJSON(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "not encoded: " + err.Error()
	}
	return string(b)
}

func eventLine(e corev1.Event) string {
	at := e.LastTimestamp.Time
	if at.IsZero() {
		at = e.EventTime.Time
	}
	return fmt.Sprintf("%s %s %s %s/%s: %s", at.UTC().Format(time.RFC3339), e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
}

// trim keeps the evidence under maxEvidence: the events are cut from the oldest, and what still
// does not fit is cut with a note, so the object can always be written.
func trim(data map[string]string) {
	size := func() int {
		n := 0
		for k, v := range data {
			n += len(k) + len(v)
		}
		return n
	}
	if over := size() - maxEvidence; over > 0 {
		// Drop whole lines from the front: up to the first line end at or past `over` bytes.
		ev := data["events.txt"]
		if i := strings.IndexByte(ev[min(over-1, len(ev)):], '\n'); i >= 0 {
			data["events.txt"] = ev[over+i:]
		} else {
			data["events.txt"] = ""
		}
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if over := size() - maxEvidence; over > 0 && len(data[k]) > over+100 {
			data[k] = data[k][:len(data[k])-over-100] + "\n... cut to fit the evidence size limit"
		}
	}
}

// PruneEvidence deletes the evidence ConfigMaps whose keep time (their expires-at) has passed and
// returns how many. One whose expiry cannot be read is kept: evidence is never lost by mistake.
func (a *Activities) PruneEvidence(ctx context.Context, now time.Time) (int, error) {
	cms := a.Kube.CoreV1().ConfigMaps(a.ownNamespace())
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: LabelEvidence + "=true"})
	if err != nil {
		return 0, fmt.Errorf("list evidence: %w", err)
	}
	n := 0
	for _, cm := range list.Items {
		until, err := time.Parse(time.RFC3339, cm.Annotations[kubeobj.AnnotationExpiresAt])
		if err != nil || now.Before(until) {
			continue
		}
		uid := cm.UID
		err = cms.Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return n, fmt.Errorf("delete evidence %s: %w", cm.Name, err)
		}
		n++
	}
	return n, nil
}
