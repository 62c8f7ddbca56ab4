package remediation

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// unitGPU is gpu-0 of node-1 as a unit: its whole device and two partitions.
var unitGPU = device.ID{Driver: "gpu.example.com", Pool: "node-1", Device: "counters=gpu-0-counters"}

// fencedDevices are the devices the cluster's rules select, by rule.
func fencedDevices(t *testing.T, kube *fake.Clientset) []string {
	t.Helper()
	rules, err := kube.ResourceV1().DeviceTaintRules().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rules.Items {
		if r.Annotations[kubeobj.AnnotationUnit] != unitGPU.String() || r.Annotations[kubeobj.AnnotationDevice] != "gpu.example.com/node-1/"+*r.Spec.DeviceSelector.Device {
			t.Fatalf("rule %s annotations %v", r.Name, r.Annotations)
		}
		out = append(out, *r.Spec.DeviceSelector.Device+":"+r.Spec.Taint.Key)
	}
	slices.Sort(out)
	return out
}

// A unit is fenced by one rule per form, each its own and naming the unit; one Event per holder
// names the physical device; a form whose rule went missing is found and fenced again, and
// the release deletes every form's rule.
func TestUnitRulesStandAndFallTogether(t *testing.T) {
	env, a, kube := activityEnv(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}})
	in := quarantineIn("XID 79")
	in.Device, in.Members = unitGPU, []string{"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b"}
	in.Decision, in.Reporters = "Quarantined", []decide.Reporter{{Namespace: "ns", Pod: "a", Device: "gpu-0-mig-a"}}
	if _, err := env.ExecuteActivity(a.Quarantine, in); err != nil {
		t.Fatal(err)
	}
	want := []string{"gpu-0-mig-a:" + decide.TaintQuarantine, "gpu-0-mig-b:" + decide.TaintQuarantine, "gpu-0:" + decide.TaintQuarantine}
	if got := fencedDevices(t, kube); !slices.Equal(got, want) {
		t.Fatalf("rules select %v, want %v", got, want)
	}
	evs, _ := kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 || !strings.Contains(evs.Items[0].Message, "physical device "+unitGPU.String()+" (3 forms") {
		t.Fatalf("events %+v, want one naming the physical device", evs.Items)
	}

	// Someone deletes one form's rule: the unit's fence still stands, and the form is missing.
	gone := device.ID{Driver: unitGPU.Driver, Pool: unitGPU.Pool, Device: "gpu-0-mig-b"}.TaintRuleName()
	if err := kube.ResourceV1().DeviceTaintRules().Delete(context.Background(), gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := env.ExecuteActivity(a.InspectRule, InspectInput{Device: unitGPU, Effect: "NoSchedule", Members: in.Members})
	if err != nil {
		t.Fatal(err)
	}
	var info decide.RuleInfo
	if err := v.Get(&info); err != nil {
		t.Fatal(err)
	}
	if !info.InForce() || !slices.Equal(info.Missing, []string{"gpu-0-mig-b"}) {
		t.Fatalf("inspect %+v, want in force with gpu-0-mig-b missing", info)
	}
	// Probation: the refresh rewrites every rule and makes the missing one.
	pin := in
	pin.Key, pin.Decision, pin.Reporters = decide.TaintProbation, "", nil
	if _, err := env.ExecuteActivity(a.RefreshRule, pin); err != nil {
		t.Fatal(err)
	}
	wantProbation := []string{"gpu-0-mig-a:" + decide.TaintProbation, "gpu-0-mig-b:" + decide.TaintProbation, "gpu-0:" + decide.TaintProbation}
	if got := fencedDevices(t, kube); !slices.Equal(got, wantProbation) {
		t.Fatalf("after refresh rules select %v, want %v", got, wantProbation)
	}
	// A fence whose result was lost covered a form that a reconfiguration then withdrew: the unit
	// no longer lists it, and its release still deletes that form's rule.
	withdrawn := in
	withdrawn.Members, withdrawn.Decision, withdrawn.Reporters = []string{"gpu-0-mig-c"}, "", nil
	if _, err := env.ExecuteActivity(a.Quarantine, withdrawn); err != nil {
		t.Fatal(err)
	}
	other := quarantineIn("another unit")
	other.Device, other.Members = device.ID{Driver: unitGPU.Driver, Pool: unitGPU.Pool, Device: "counters=gpu-1-counters"}, []string{"gpu-1"}
	if _, err := env.ExecuteActivity(a.Quarantine, other); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.ReleaseRule, ReleaseInput{Device: unitGPU, Actor: "devicewarden", Members: in.Members}); err != nil {
		t.Fatal(err)
	}
	left, err := kube.ResourceV1().DeviceTaintRules().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(left.Items) != 1 || *left.Items[0].Spec.DeviceSelector.Device != "gpu-1" {
		t.Fatalf("after the unit's release, rules left: %+v (%v); want only the other unit's", left.Items, err)
	}
	if err := kube.ResourceV1().DeviceTaintRules().Delete(context.Background(), left.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := fencedDevices(t, kube); len(got) != 0 {
		t.Fatalf("after release rules select %v", got)
	}
	// With no rule left, the unit's fence is gone (an operator release), and a refresh says so.
	v, err = env.ExecuteActivity(a.InspectRule, InspectInput{Device: unitGPU, Effect: "NoSchedule", Members: in.Members})
	if err != nil {
		t.Fatal(err)
	}
	var after decide.RuleInfo
	if err := v.Get(&after); err != nil || after.Present || len(after.Missing) != 0 {
		t.Fatalf("inspect of a released unit %+v %v", after, err)
	}
	v, err = env.ExecuteActivity(a.RefreshRule, pin)
	var res RefreshResult
	if err != nil || v.Get(&res) != nil || !res.Missing {
		t.Fatalf("refresh of a released unit %+v %v", res, err)
	}
}

// A form's rule that was lost is written again and the call says it created one; a form's rule
// someone edited is what the look reports (the unit's fence is broken); a rule that carries the
// unit's label but names another unit is not the unit's to release.
func TestUnitRulesEditedLostAndForeign(t *testing.T) {
	env, a, kube := activityEnv(t)
	ctx := context.Background()
	in := quarantineIn("XID 79")
	in.Device, in.Members = unitGPU, []string{"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b"}
	if _, err := env.ExecuteActivity(a.Quarantine, in); err != nil {
		t.Fatal(err)
	}
	middle := device.ID{Driver: unitGPU.Driver, Pool: unitGPU.Pool, Device: "gpu-0-mig-a"}.TaintRuleName()
	if err := kube.ResourceV1().DeviceTaintRules().Delete(ctx, middle, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := env.ExecuteActivity(a.Quarantine, in)
	var res QuarantineResult
	if err != nil || v.Get(&res) != nil || !res.Created {
		t.Fatalf("re-fence after a lost rule: %+v %v, want created", res, err)
	}
	r, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, middle, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.Taint.Key = "example.com/other"
	if _, err := kube.ResourceV1().DeviceTaintRules().Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err = env.ExecuteActivity(a.InspectRule, InspectInput{Device: unitGPU, Effect: "NoSchedule", Members: in.Members})
	var info decide.RuleInfo
	if err != nil || v.Get(&info) != nil || info.InForce() || info.Key != "example.com/other" {
		t.Fatalf("inspect with an edited form's rule: %+v %v, want the edited rule", info, err)
	}
	foreign := r.DeepCopy()
	foreignName := device.ID{Driver: unitGPU.Driver, Pool: unitGPU.Pool, Device: "gpu-9"}.TaintRuleName()
	foreign.ObjectMeta = metav1.ObjectMeta{Name: foreignName, Labels: r.Labels,
		Annotations: map[string]string{kubeobj.AnnotationUnit: "gpu.example.com/node-1/counters=other", kubeobj.AnnotationDevice: "gpu.example.com/node-1/gpu-9"}}
	gpu9 := "gpu-9"
	foreign.Spec.DeviceSelector.Device = &gpu9
	if _, err := kube.ResourceV1().DeviceTaintRules().Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.ReleaseRule, ReleaseInput{Device: unitGPU, Actor: "devicewarden", Members: in.Members}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, foreignName, metav1.GetOptions{}); err != nil {
		t.Fatalf("another unit's rule deleted: %v", err)
	}
}
