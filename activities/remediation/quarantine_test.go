package remediation

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/activities/activitytest"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

var gpu3 = device.ID{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-3"}

// activityEnv runs the activities in the SDK's activity test environment against a fake clientset
// holding objs. These are narrow tests of each outcome; the e2e suite runs them on a real apiserver.
func activityEnv(t *testing.T, objs ...runtime.Object) (*testsuite.TestActivityEnvironment, *Activities, *fake.Clientset) {
	t.Helper()
	kube := fake.NewClientset(objs...)
	// The fake's object tracker ignores DeleteCollection; remove the Pods the selector picks.
	kube.PrependReactor("delete-collection", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		dc := action.(k8stesting.DeleteCollectionAction)
		sel := dc.GetListRestrictions().Labels
		pods, err := kube.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), dc.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		for _, p := range pods.(*corev1.PodList).Items {
			if sel.Matches(labels.Set(p.Labels)) {
				if err := kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), p.Namespace, p.Name); err != nil {
					return true, nil, err
				}
			}
		}
		return true, nil, nil
	})
	a := &Activities{Kube: kube, Metrics: metrics.New()}
	return activitytest.Env(a), a, kube
}

func quarantineIn(reason string) QuarantineInput {
	return QuarantineInput{Device: gpu3, Reason: reason, Actor: "devicewarden", WorkflowID: gpu3.WorkflowID(),
		ExpiresAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Effect: resourcev1.DeviceTaintEffectNoSchedule}
}

// existingRule is the rule a Quarantine with in would have written.
func existingRule(in QuarantineInput) *resourcev1.DeviceTaintRule {
	return (ruleWriter{&Activities{}}).rule(in)
}

func quarantine(t *testing.T, env *testsuite.TestActivityEnvironment, in QuarantineInput) (QuarantineResult, error) {
	t.Helper()
	v, err := env.ExecuteActivity((&Activities{}).Quarantine, in)
	var res QuarantineResult
	if err == nil {
		err = v.Get(&res)
	}
	return res, err
}

func TestQuarantineCreatesTheRule(t *testing.T) {
	env, a, kube := activityEnv(t)
	res, err := quarantine(t, env, quarantineIn("XID 79"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.RuleName != gpu3.TaintRuleName() || res.Effect != "NoSchedule" {
		t.Fatalf("result %+v", res)
	}
	r, err := kube.ResourceV1().DeviceTaintRules().Get(context.Background(), gpu3.TaintRuleName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sel := r.Spec.DeviceSelector
	if *sel.Driver != gpu3.Driver || *sel.Pool != gpu3.Pool || *sel.Device != gpu3.Device {
		t.Fatalf("selector %+v", sel)
	}
	if r.Spec.Taint != (resourcev1.DeviceTaint{Key: kubeobj.TaintKey, Value: "true", Effect: resourcev1.DeviceTaintEffectNoSchedule}) {
		t.Fatalf("taint %+v", r.Spec.Taint)
	}
	want := map[string]string{kubeobj.AnnotationDevice: gpu3.String(), kubeobj.AnnotationReason: "XID 79", kubeobj.AnnotationActor: "devicewarden",
		kubeobj.AnnotationWorkflow: gpu3.WorkflowID(), kubeobj.AnnotationExpiresAt: "2026-12-01T00:00:00Z"}
	for k, v := range want {
		if r.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, r.Annotations[k], v)
		}
	}
	if r.Labels[kubeobj.LabelManagedBy] != kubeobj.ManagedBy || r.Labels[kubeobj.LabelDevice] != "gpu-3" || r.Labels[kubeobj.LabelPool] != "node-1" {
		t.Errorf("labels %v", r.Labels)
	}
	if n := testutil.ToFloat64(a.Metrics.Quarantines.WithLabelValues("created")); n != 1 {
		t.Errorf("created metric %v", n)
	}
}

func TestQuarantineKeepsAnIdenticalRule(t *testing.T) {
	in := quarantineIn("XID 79")
	env, a, kube := activityEnv(t, existingRule(in))
	res, err := quarantine(t, env, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Created || res.RuleName != gpu3.TaintRuleName() || res.Effect != "NoSchedule" {
		t.Fatalf("result %+v", res)
	}
	for _, act := range kube.Actions() {
		if act.GetVerb() == "update" {
			t.Fatalf("an identical rule was rewritten: %v", act)
		}
	}
	if n := testutil.ToFloat64(a.Metrics.Quarantines.WithLabelValues("existing")); n != 1 {
		t.Errorf("existing metric %v", n)
	}
}

func TestQuarantineUpdatesARestriction(t *testing.T) {
	restricted := quarantineIn("Unknown for 5m")
	restricted.Key = "devicewarden.io/restricted"
	old := existingRule(restricted)
	old.Annotations["team.example.com/ticket"] = "OPS-42" // someone else's annotation stays
	env, a, kube := activityEnv(t, old)
	in := quarantineIn("XID 79")
	in.Effect = resourcev1.DeviceTaintEffectNoExecute
	res, err := quarantine(t, env, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Created || res.Effect != "NoExecute" {
		t.Fatalf("result %+v", res)
	}
	r, _ := kube.ResourceV1().DeviceTaintRules().Get(context.Background(), gpu3.TaintRuleName(), metav1.GetOptions{})
	if r.Spec.Taint.Key != kubeobj.TaintKey || r.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNoExecute || r.Annotations[kubeobj.AnnotationReason] != "XID 79" ||
		r.Annotations["team.example.com/ticket"] != "OPS-42" {
		t.Fatalf("rule after update: %+v %v", r.Spec.Taint, r.Annotations)
	}
	if n := testutil.ToFloat64(a.Metrics.Quarantines.WithLabelValues("updated")); n != 1 {
		t.Errorf("updated metric %v", n)
	}
}

func TestQuarantineDryRunPreviews(t *testing.T) {
	env, a, kube := activityEnv(t)
	a.DryRun = true
	v, err := env.ExecuteActivity(a.Quarantine, quarantineIn("XID 79"))
	if err != nil {
		t.Fatal(err)
	}
	var res QuarantineResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	r, _ := kube.ResourceV1().DeviceTaintRules().Get(context.Background(), gpu3.TaintRuleName(), metav1.GetOptions{})
	if res.Effect != "None" || r.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNone {
		t.Fatalf("dry run: result %+v, rule effect %s", res, r.Spec.Taint.Effect)
	}
}

func TestQuarantineOfADevicePluginDeviceIsARecord(t *testing.T) {
	env, a, kube := activityEnv(t)
	in := quarantineIn("XID 79")
	in.Device = device.ID{Driver: "example.com/gpu", Pool: "node-1", Device: "GPU-abc"}
	res, err := quarantine(t, env, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Created || res.RuleName != "" || len(kube.Actions()) != 0 {
		t.Fatalf("result %+v, API calls %v", res, kube.Actions())
	}
	if n := testutil.ToFloat64(a.Metrics.Quarantines.WithLabelValues("recorded")); n != 1 {
		t.Errorf("recorded metric %v", n)
	}
}

func TestQuarantineWaitsForADeletingRule(t *testing.T) {
	old := existingRule(quarantineIn("XID 79"))
	old.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	old.Finalizers = []string{"example.com/hold"}
	env, _, _ := activityEnv(t, old)
	_, err := quarantine(t, env, quarantineIn("XID 79"))
	if err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("err %v", err)
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.NonRetryable() {
		t.Fatalf("a rule being deleted must be retried: %v", err)
	}
}

func TestQuarantineRefusesARuleNameCollision(t *testing.T) {
	other := existingRule(quarantineIn("XID 79"))
	other.Annotations[kubeobj.AnnotationDevice] = "gpu.example.com/node-9/gpu-0"
	env, a, _ := activityEnv(t, other)
	_, err := quarantine(t, env, quarantineIn("XID 79"))
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != ErrRuleNameCollision || !app.NonRetryable() {
		t.Fatalf("err %v, want a non-retryable %s", err, ErrRuleNameCollision)
	}
	if n := testutil.ToFloat64(a.Metrics.Quarantines.WithLabelValues("error")); n != 1 {
		t.Errorf("error metric %v", n)
	}
}

func TestQuarantineAPIErrorIsRetried(t *testing.T) {
	env, a, kube := activityEnv(t)
	kube.PrependReactor("create", "devicetaintrules", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
	})
	_, err := quarantine(t, env, quarantineIn("XID 79"))
	if err == nil || !strings.Contains(err.Error(), "etcd leader changed") {
		t.Fatalf("err %v", err)
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.NonRetryable() {
		t.Fatalf("an API error must be retried: %v", err)
	}
	if n := testutil.ToFloat64(a.Metrics.Quarantines.WithLabelValues("error")); n != 1 {
		t.Errorf("error metric %v", n)
	}
}

// A quarantine writes a Warning Event on each Pod and claim that reported the device (once each,
// however often the activity runs), so kubectl describe on them tells why; no reporters, no Events.
func TestQuarantineTellsTheReportersPodsAndClaims(t *testing.T) {
	env, _, kube := activityEnv(t)
	in := quarantineIn("XID 79")
	in.Decision = string(decide.Quarantined)
	in.Reporters = []decide.Reporter{
		{Namespace: "team", Pod: "trainer-0", Container: "a", Claim: "trainer-0-gpu"},
		{Namespace: "team", Pod: "trainer-0", Container: "b", Claim: "trainer-0-gpu"},
		{Namespace: "team", Pod: "", Claim: ""},
	}
	for range 2 {
		if _, err := quarantine(t, env, in); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := kube.CoreV1().Events("team").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range evs.Items {
		got[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] = e.Reason + ": " + e.Message
	}
	if len(evs.Items) != 2 || !strings.HasPrefix(got["Pod/trainer-0"], "DeviceQuarantined: device "+gpu3.String()+" quarantined by") ||
		!strings.Contains(got["ResourceClaim/trainer-0-gpu"], "XID 79") || !strings.Contains(got["Pod/trainer-0"], gpu3.TaintRuleName()) {
		t.Fatalf("events = %v", got)
	}
	in.Decision = ""
	in.Reporters[0].Pod = "other"
	if _, err := quarantine(t, env, in); err != nil {
		t.Fatal(err)
	}
	if evs, _ := kube.CoreV1().Events("team").List(context.Background(), metav1.ListOptions{}); len(evs.Items) != 2 {
		t.Fatalf("a call without a decision wrote events: %d", len(evs.Items))
	}
}

// An Event's name stays within the 253 characters Kubernetes allows, keeping its distinct end.
func TestDecisionEventNamesFit(t *testing.T) {
	env, _, kube := activityEnv(t)
	in := quarantineIn("XID 79")
	in.Decision = string(decide.Restricted)
	long := strings.Repeat("p", 300)
	in.Reporters = []decide.Reporter{{Namespace: "team", Pod: long}}
	if _, err := quarantine(t, env, in); err != nil {
		t.Fatal(err)
	}
	evs, _ := kube.CoreV1().Events("team").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 || len(evs.Items[0].Name) != 253 || !strings.HasSuffix(evs.Items[0].Name, "."+gpu3.TaintRuleName()+".noschedule") ||
		evs.Items[0].Reason != "DeviceRestricted" {
		t.Fatalf("events = %+v", evs.Items)
	}
}

// A new quarantine counts the time since the device's last one, and a relapse when the last ended
// within 30 days; a retried call that finds its own rule counts nothing again.
func TestQuarantineCountsIncidentsAndRelapses(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		name                string
		previous, closed    time.Time
		decision            string
		incidents, relapses uint64
	}{
		{"first quarantine", time.Time{}, time.Time{}, string(decide.Quarantined), 0, 0},
		{"released yesterday", now.Add(-48 * time.Hour), now.Add(-24 * time.Hour), string(decide.Quarantined), 1, 1},
		{"released 31 days ago", now.Add(-32 * 24 * time.Hour), now.Add(-31 * 24 * time.Hour), string(decide.Quarantined), 1, 0},
		{"a restriction", now.Add(-48 * time.Hour), now.Add(-24 * time.Hour), string(decide.Restricted), 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, a, _ := activityEnv(t)
			in := quarantineIn("XID 79")
			in.PreviousAt, in.PreviousClosedAt, in.Decision = tt.previous, tt.closed, tt.decision
			for range 2 {
				v, err := env.ExecuteActivity(a.Quarantine, in)
				if err != nil || v == nil {
					t.Fatal(err)
				}
			}
			if n := histogramCount(t, a.Metrics.TimeBetweenIncidents); n != tt.incidents {
				t.Errorf("incidents observed %d, want %d", n, tt.incidents)
			}
			if n := testutil.ToFloat64(a.Metrics.Relapses); n != float64(tt.relapses) {
				t.Errorf("relapses %v, want %d", n, tt.relapses)
			}
		})
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
