package migration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

func TestPreserveEvidence(t *testing.T) {
	p := pod("train-0", nil, nil)
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("train-0-gpu-x")}}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train-0-gpu-x"}}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "e1"}, Type: "Warning", Reason: "BackOff", Message: "restarting failed container",
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "train-0"}, LastTimestamp: metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))}
	other := ev.DeepCopy()
	other.Name, other.InvolvedObject.Name, other.Message = "e2", "someone-else", "not ours"
	env, a, kube := activityEnv(t, p, claim, ev, other)
	a.OwnNamespace = "devicewarden"
	w := trainJob
	w.Pods = []string{"train-0", "train-1"}
	in := EvidenceInput{WorkflowID: "migrate/gpu/uid-train/7", Device: gpu3, Workload: w, Report: "gpu-3 Unhealthy: XID 79", Keep: 30 * 24 * time.Hour}
	v, err := env.ExecuteActivity(a.PreserveEvidence, in)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := v.Get(&name); err != nil || name != EvidenceName(in.WorkflowID) {
		t.Fatalf("name %q %v", name, err)
	}
	cm, err := kube.CoreV1().ConfigMaps("devicewarden").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := cm.Data
	if d["report"] != in.Report || !strings.Contains(d["pod-train-0.json"], `"name": "train-0"`) || !strings.Contains(d["claim-train-0-gpu-x.json"], "train-0-gpu-x") ||
		d["pod-train-1.json"] != "gone before the evidence was taken" || d["events.txt"] != "2026-11-30T09:00:00Z Warning BackOff Pod/train-0: restarting failed container" {
		t.Fatalf("evidence data %v", d)
	}
	if len(cm.OwnerReferences) != 0 || cm.Labels[LabelEvidence] != "true" || cm.Annotations[kubeobj.AnnotationWorkflow] != in.WorkflowID || cm.Annotations[kubeobj.AnnotationExpiresAt] == "" {
		t.Fatalf("evidence meta %+v", cm.ObjectMeta)
	}
	// A retry keeps the first evidence.
	if err := kube.CoreV1().Pods("team-a").Delete(context.Background(), "train-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.PreserveEvidence, in); err != nil {
		t.Fatal(err)
	}
	cm, _ = kube.CoreV1().ConfigMaps("devicewarden").Get(context.Background(), name, metav1.GetOptions{})
	if !strings.Contains(cm.Data["pod-train-0.json"], `"name": "train-0"`) {
		t.Fatal("a retry overwrote the evidence")
	}
}

func TestEvidenceFitsTheObjectLimit(t *testing.T) {
	var events []string
	for i := range 20000 {
		events = append(events, fmt.Sprintf("2026-11-30T09:%02d:00Z Warning BackOff Pod/p: event %05d %s", i%60, i, strings.Repeat("x", 40)))
	}
	data := map[string]string{"events.txt": strings.Join(events, "\n"), "pod-p.json": strings.Repeat("y", 950<<10), "report": "r"}
	trim(data)
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	if n > maxEvidence || data["report"] != "r" || !strings.HasSuffix(data["pod-p.json"], "cut to fit the evidence size limit") {
		t.Fatalf("size %d (limit %d), report %q", n, maxEvidence, data["report"])
	}
}

func TestPruneEvidenceKeepsWhatIsNotDue(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ev := func(name, expires string, evidence bool) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{},
			Annotations: map[string]string{kubeobj.AnnotationExpiresAt: expires}}}
		if evidence {
			cm.Labels[LabelEvidence] = "true"
		}
		return cm
	}
	_, a, kube := activityEnv(t,
		ev("due", now.Add(-time.Minute).Format(time.RFC3339), true),
		ev("exactly-due", now.Format(time.RFC3339), true),
		ev("kept", now.Add(time.Hour).Format(time.RFC3339), true),
		ev("unreadable", "next week", true),
		ev("not-evidence", now.Add(-time.Hour).Format(time.RFC3339), false))
	n, err := a.PruneEvidence(context.Background(), now)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d (%v), want 2", n, err)
	}
	left, _ := kube.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	var names []string
	for _, cm := range left.Items {
		names = append(names, cm.Name)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "kept,not-evidence,unreadable" {
		t.Fatalf("left %v", names)
	}
}
