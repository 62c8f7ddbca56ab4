package hygiene

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

func sharedClaim(name, mem string) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "t", UID: types.UID("uid-" + name)},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: drv, Pool: "n1", Device: "gpu-0",
				ShareID: ptr.To(types.UID("s-" + name)), ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse(mem)}}}}}}}
}

// sharedSlice is node n1's slice: gpu-0, shared, 40Gi of memory granted in 2Gi steps.
func sharedSlice() *resourcev1.ResourceSlice {
	sl := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-" + drv},
		Spec: resourcev1.ResourceSliceSpec{Driver: drv, NodeName: ptr.To("n1"), Pool: resourcev1.ResourcePool{Name: "n1"}, Devices: []resourcev1.Device{{Name: "gpu-0"}}}}
	sl.Spec.Devices[0].AllowMultipleAllocations = ptr.To(true)
	sl.Spec.Devices[0].Capacity = map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi"),
		RequestPolicy: &resourcev1.CapacityRequestPolicy{ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("2Gi")), Step: ptr.To(resource.MustParse("2Gi"))}}}}
	return sl
}

// TestCheckCapacityRecordsGrantsAndCounts: shares are checked against the policy recorded when
// first seen; a policy changed later does not turn an old share into a breach.
func TestCheckCapacityRecordsGrantsAndCounts(t *testing.T) {
	sl := sharedSlice()
	env, a, kube := activityEnv(t, sl, sharedClaim("a", "6Gi"), sharedClaim("b", "10Gi"))
	a.Metrics = metrics.New()
	v, err := env.ExecuteActivity(a.CheckCapacity, capacity.CheckInput{Record: true})
	if err != nil {
		t.Fatal(err)
	}
	var rep capacity.CheckReport
	_ = v.Get(&rep)
	if len(rep.Violations) != 0 || rep.Recorded != 2 || rep.Claims != 2 || rep.Devices != 1 {
		t.Fatalf("report = %+v", rep)
	}
	ctx := context.Background()
	grant, err := kube.CoreV1().ConfigMaps("default").Get(ctx, capacity.GrantConfigMap("uid-a"), metav1.GetOptions{})
	if err != nil || !strings.Contains(grant.Data[capacity.GrantKey], `"uid-a/gpu/`+drv+`/n1/gpu-0/s-a"`) || grant.Labels[capacity.GrantLabel] != "uid-a" {
		t.Fatalf("grant = %+v %v", grant, err)
	}
	// The driver now wants 4Gi steps: the recorded shares still pass; a new 6Gi share does not.
	sl.Spec.Devices[0].Capacity["memory"].RequestPolicy.ValidRange.Min = ptr.To(resource.MustParse("4Gi"))
	sl.Spec.Devices[0].Capacity["memory"].RequestPolicy.ValidRange.Step = ptr.To(resource.MustParse("4Gi"))
	if _, err := kube.ResourceV1().ResourceSlices().Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.ResourceV1().ResourceClaims("t").Create(ctx, sharedClaim("c", "26Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err = env.ExecuteActivity(a.CheckCapacity, capacity.CheckInput{})
	if err != nil {
		t.Fatal(err)
	}
	rep = capacity.CheckReport{}
	_ = v.Get(&rep)
	if len(rep.Violations) != 2 || rep.Violations[0].Invariant != capacity.Oversold || rep.Violations[1].Claim != "c" || rep.Violations[1].Invariant != capacity.PolicyBreach || rep.Recorded != 0 {
		t.Fatalf("violations = %+v", rep.Violations)
	}
	if n := testutil.ToFloat64(a.Metrics.CapacityViolations.WithLabelValues(capacity.Oversold)); n != 1 {
		t.Errorf("oversold gauge %v", n)
	}
	if n := testutil.ToFloat64(a.Metrics.CapacityViolations.WithLabelValues(capacity.DuplicateShareID)); n != 0 {
		t.Errorf("duplicate gauge %v", n)
	}
	// The tenant of claim c writes an empty policy onto its own claim, where the record used to
	// be: the breach stays.
	forged, _ := kube.ResourceV1().ResourceClaims("t").Get(ctx, "c", metav1.GetOptions{})
	forged.Annotations = map[string]string{"devicewarden.io/granted-capacity-policy": `{"uid-c/gpu/` + drv + `/n1/gpu-0/s-c":{"memory":{}}}`}
	if _, err := kube.ResourceV1().ResourceClaims("t").Update(ctx, forged, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err = env.ExecuteActivity(a.CheckCapacity, capacity.CheckInput{})
	if err != nil {
		t.Fatal(err)
	}
	rep = capacity.CheckReport{}
	_ = v.Get(&rep)
	if len(rep.Violations) != 2 || rep.Violations[1].Claim != "c" || rep.Violations[1].Invariant != capacity.PolicyBreach {
		t.Fatalf("a record the tenant wrote on its claim hid the breach: %+v", rep.Violations)
	}
	// A record that does not decode is an error, not a silent pass.
	grant.Data[capacity.GrantKey] = "{not json"
	if _, err := kube.CoreV1().ConfigMaps("default").Update(ctx, grant, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.CheckCapacity, capacity.CheckInput{}); err == nil || !strings.Contains(err.Error(), capacity.GrantConfigMap("uid-a")) {
		t.Errorf("garbled record: %v", err)
	}
	// The records of claims that are gone are deleted by a recording check.
	if err := kube.ResourceV1().ResourceClaims("t").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.CheckCapacity, capacity.CheckInput{Record: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, capacity.GrantConfigMap("uid-a"), metav1.GetOptions{}); err == nil {
		t.Error("the record of a claim that is gone was kept")
	}
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, capacity.GrantConfigMap("uid-b"), metav1.GetOptions{}); err != nil {
		t.Errorf("the record of a live claim: %v", err)
	}
}

// Two `capacity check --record` runs at once: a claim made after this run listed the claims, and
// its grant record written by the other run meanwhile, is not taken for a gone claim's record
// (#40, check). Before, the claims were listed before the records were read, and this run
// deleted the other's fresh record.
func TestConcurrentChecksKeepEachOthersRecords(t *testing.T) {
	sl := sharedSlice()
	env, a, kube := activityEnv(t, sl, sharedClaim("a", "6Gi"))
	newer := sharedClaim("new", "4Gi")
	once := false
	// Right after this run's list of claims, the other run sees the new claim and records it.
	kube.PrependReactor("list", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if once {
			return false, nil, nil
		}
		once = true
		list, err := kube.Tracker().List(resourcev1.SchemeGroupVersion.WithResource("resourceclaims"),
			resourcev1.SchemeGroupVersion.WithKind("ResourceClaim"), "")
		if err != nil {
			return true, nil, err
		}
		// The fake clientset holds its lock while a reactor runs: write through its tracker.
		record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: capacity.GrantConfigMap("uid-new"), Namespace: "default",
			Labels: map[string]string{capacity.GrantLabel: "uid-new"}},
			Data: map[string]string{capacity.GrantKey: capacity.Snapshot(newer, []*resourcev1.ResourceSlice{sl})}}
		for _, o := range []runtime.Object{newer, record} {
			if err := kube.Tracker().Add(o); err != nil {
				return true, nil, err
			}
		}
		return true, list, nil
	})
	if _, err := env.ExecuteActivity(a.CheckCapacity, capacity.CheckInput{Record: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps("default").Get(context.Background(), capacity.GrantConfigMap("uid-new"), metav1.GetOptions{}); err != nil {
		t.Fatalf("the other run's fresh record of a live claim: %v", err)
	}
}
