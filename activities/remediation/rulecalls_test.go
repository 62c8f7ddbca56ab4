package remediation

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

func TestInspectRule(t *testing.T) {
	ours := existingRule(quarantineIn("XID 79"))
	at := func(s int) *metav1.Time { return &metav1.Time{Time: time.Unix(int64(s), 0)} }
	ours.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: kubeobj.FieldManager, Time: at(30)}, {Manager: "kubectl-edit", Time: at(10)},
		{Manager: "device-taint-eviction-controller", Time: at(20)}}
	deleting := ours.DeepCopy()
	deleting.DeletionTimestamp, deleting.Finalizers = at(40), []string{"example.com/hold"}
	tests := []struct {
		name string
		rule *resourcev1.DeviceTaintRule
		id   device.ID
		want decide.RuleInfo
	}{
		{"missing", nil, gpu3, decide.RuleInfo{Name: gpu3.TaintRuleName(), WantEffect: "NoSchedule"}},
		{"present", ours, gpu3, decide.RuleInfo{Name: gpu3.TaintRuleName(), Present: true, Key: kubeobj.TaintKey, Effect: "NoSchedule", WantEffect: "NoSchedule",
			Actor: "device-taint-eviction-controller"}},
		{"deleting", deleting, gpu3, decide.RuleInfo{Name: gpu3.TaintRuleName(), Present: true, Deleting: true, Key: kubeobj.TaintKey, Effect: "NoSchedule",
			WantEffect: "NoSchedule", Actor: "device-taint-eviction-controller"}},
		{"device plugin", nil, device.ID{Driver: "example.com/gpu", Pool: "node-1", Device: "GPU-1"},
			decide.RuleInfo{Name: device.ID{Driver: "example.com/gpu", Pool: "node-1", Device: "GPU-1"}.TaintRuleName(), Present: true, Key: kubeobj.TaintKey, Effect: "NoSchedule", WantEffect: "NoSchedule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			if tt.rule != nil {
				objs = append(objs, tt.rule)
			}
			env, a, _ := activityEnv(t, objs...)
			v, err := env.ExecuteActivity(a.InspectRule, InspectInput{Device: tt.id, Effect: "NoSchedule"})
			if err != nil {
				t.Fatal(err)
			}
			var got decide.RuleInfo
			if err := v.Get(&got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// refresh runs RefreshRule in the activity environment and decodes its result.
func refresh(env *testsuite.TestActivityEnvironment, a *Activities, in QuarantineInput) (RefreshResult, error) {
	var res RefreshResult
	v, err := env.ExecuteActivity(a.RefreshRule, in)
	if err == nil {
		err = v.Get(&res)
	}
	return res, err
}

func TestRefreshRule(t *testing.T) {
	in := quarantineIn("XID 79")
	in.ExpiresAt = in.ExpiresAt.Add(48 * time.Hour)
	in.Effect = resourcev1.DeviceTaintEffectNoExecute
	t.Run("rewrites expiry and effect", func(t *testing.T) {
		env, a, kube := activityEnv(t, existingRule(quarantineIn("XID 79")))
		res, err := refresh(env, a, in)
		if err != nil || res.Missing || res.Effect != "NoExecute" {
			t.Fatalf("result %+v %v", res, err)
		}
		r, _ := kube.ResourceV1().DeviceTaintRules().Get(context.Background(), gpu3.TaintRuleName(), metav1.GetOptions{})
		if r.Annotations[kubeobj.AnnotationExpiresAt] != "2026-12-03T00:00:00Z" || r.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNoExecute {
			t.Fatalf("rule %v %+v", r.Annotations, r.Spec.Taint)
		}
	})
	t.Run("never creates a missing rule", func(t *testing.T) {
		env, a, kube := activityEnv(t)
		res, err := refresh(env, a, in)
		if err != nil || !res.Missing {
			t.Fatalf("result %+v %v", res, err)
		}
		if _, err := kube.ResourceV1().DeviceTaintRules().Get(context.Background(), gpu3.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("refresh created a rule: %v", err)
		}
	})
	t.Run("a rule being deleted is missing", func(t *testing.T) {
		old := existingRule(quarantineIn("XID 79"))
		old.DeletionTimestamp, old.Finalizers = &metav1.Time{Time: time.Now()}, []string{"example.com/hold"}
		env, a, _ := activityEnv(t, old)
		res, err := refresh(env, a, in)
		if err != nil || !res.Missing {
			t.Fatalf("result %+v %v", res, err)
		}
	})
}

func TestReleaseRule(t *testing.T) {
	in := ReleaseInput{Device: gpu3, Reason: "probe, canary and window passed", Actor: "devicewarden",
		QuarantinedAt: time.Now().Add(-time.Hour), FirstReviewPassed: true}
	t.Run("deletes its own rule and records the release", func(t *testing.T) {
		env, a, kube := activityEnv(t, existingRule(quarantineIn("XID 79")))
		if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.ResourceV1().DeviceTaintRules().Get(context.Background(), gpu3.TaintRuleName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("rule still there: %v", err)
		}
		if n := testutil.ToFloat64(a.Metrics.Releases.WithLabelValues("released")); n != 1 {
			t.Errorf("releases metric %v", n)
		}
		if n := testutil.ToFloat64(a.Metrics.FalseQuarantines); n != 1 {
			t.Errorf("false quarantines metric %v", n)
		}
		if n := testutil.CollectAndCount(a.Metrics.QuarantineSeconds); n != 1 {
			t.Errorf("time in quarantine not observed")
		}
		if n := testutil.CollectAndCount(a.Metrics.RepairSeconds); n != 0 {
			t.Errorf("a release with no repair counted as one")
		}
	})
	t.Run("a repaired device's time to repair is observed by its step, cause and first step", func(t *testing.T) {
		env, a, _ := activityEnv(t, existingRule(quarantineIn("XID 79")))
		in := in
		in.RepairedBy, in.FirstReviewPassed, in.Cause, in.First = "reset", false, "xid 48", "reset"
		if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
			t.Fatal(err)
		}
		if n := testutil.CollectAndCount(a.Metrics.RepairSeconds, "devicewarden_repair_time_to_repair_seconds"); n != 1 {
			t.Errorf("time to repair observed %d times", n)
		}
		h := a.Metrics.RepairSeconds.WithLabelValues("reset", "xid 48", "reset").(prometheus.Histogram)
		var m dto.Metric
		if err := h.Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 1 || m.GetHistogram().GetSampleSum() < 3590 {
			t.Errorf("time to repair of xid 48, first reset: %v %v", m.GetHistogram(), err)
		}
	})
	t.Run("a release from a run before the cause's labels counts as unknown, by the ladder", func(t *testing.T) {
		env, a, _ := activityEnv(t, existingRule(quarantineIn("XID 79")))
		in := in
		in.RepairedBy, in.FirstReviewPassed = "node", false
		if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
			t.Fatal(err)
		}
		h := a.Metrics.RepairSeconds.WithLabelValues("node", "unknown", "ladder").(prometheus.Histogram)
		var m dto.Metric
		if err := h.Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 1 {
			t.Errorf("time to repair of an unknown cause: %v %v", m.GetHistogram(), err)
		}
	})
	t.Run("a rule already gone is released", func(t *testing.T) {
		env, a, _ := activityEnv(t)
		if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the node and the reporting Pod and claim are told, once", func(t *testing.T) {
		env, a, kube := activityEnv(t, existingRule(quarantineIn("XID 79")))
		told := in
		told.Node = "node-1"
		told.Reporters = []decide.Reporter{{Namespace: "team", Pod: "trainer-0", Claim: "trainer-0-gpu"}}
		for range 2 {
			if _, err := env.ExecuteActivity(a.ReleaseRule, told); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]string{}
		for _, ns := range []string{"default", "team"} {
			evs, _ := kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
			for _, e := range evs.Items {
				got[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] = e.Reason + ": " + e.Message
			}
		}
		if len(got) != 3 || !strings.HasPrefix(got["Node/node-1"], "DeviceReleased: device "+gpu3.String()+" released by devicewarden: probe") ||
			got["Pod/trainer-0"] != got["Node/node-1"] || got["ResourceClaim/trainer-0-gpu"] == "" {
			t.Fatalf("events = %v", got)
		}
	})
	t.Run("another device's rule is left alone", func(t *testing.T) {
		other := existingRule(quarantineIn("XID 79"))
		other.Annotations[kubeobj.AnnotationDevice] = "gpu.example.com/node-9/gpu-0"
		env, a, kube := activityEnv(t, other)
		_, err := env.ExecuteActivity(a.ReleaseRule, in)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != ErrRuleNameCollision {
			t.Fatalf("err %v", err)
		}
		if _, err := kube.ResourceV1().DeviceTaintRules().Get(context.Background(), gpu3.TaintRuleName(), metav1.GetOptions{}); err != nil {
			t.Fatalf("the other device's rule was deleted: %v", err)
		}
		if n := testutil.ToFloat64(a.Metrics.Releases.WithLabelValues("released")); n != 0 {
			t.Errorf("a refused release was counted")
		}
	})
}
