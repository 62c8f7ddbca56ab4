package remediation

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

const domainDriver = "gpu.example.com"

// boards is a node's slice of eight GPUs on two baseboards (0-3 and 4-7); gpu-7 publishes none.
func boards(node string) resourcev1.ResourceSlice {
	s := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: resourcev1.ResourceSliceSpec{Driver: domainDriver,
		NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
	for i := range 8 {
		d := resourcev1.Device{Name: "gpu-" + strconv.Itoa(i), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}}
		if i < 7 {
			d.Attributes[domainDriver+"/baseboard"] = resourcev1.DeviceAttribute{IntValue: ptr.To(int64(i / 4))}
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return s
}

func gpu(node string, i int) device.ID {
	return device.ID{Driver: domainDriver, Pool: node, Device: "gpu-" + strconv.Itoa(i)}
}

// A reset reaches what its driver's domain says: the device alone, its node's devices, or those
// sharing its baseboard; a device that publishes no baseboard is a domain of its own.
func TestDomainPeers(t *testing.T) {
	published := []resourcev1.ResourceSlice{boards("node-1"), boards("node-2")}
	names := func(ids []device.ID) string {
		var out []string
		for _, id := range ids {
			out = append(out, id.Pool+"/"+id.Device)
		}
		return strings.Join(out, " ")
	}
	for _, tt := range []struct {
		id     device.ID
		domain string
		want   string
	}{
		{gpu("node-1", 1), "", ""},
		{gpu("node-1", 1), policy.DomainDevice, ""},
		{gpu("node-1", 1), "attribute:baseboard", "node-1/gpu-0 node-1/gpu-2 node-1/gpu-3"},
		{gpu("node-1", 5), "attribute:baseboard", "node-1/gpu-4 node-1/gpu-6"},
		{gpu("node-1", 7), "attribute:baseboard", ""},
		{gpu("node-2", 0), policy.DomainNode, "node-2/gpu-1 node-2/gpu-2 node-2/gpu-3 node-2/gpu-4 node-2/gpu-5 node-2/gpu-6 node-2/gpu-7"},
		{gpu("node-3", 0), policy.DomainNode, ""},
	} {
		if got := names(domainPeers(published, tt.id, tt.domain)); got != tt.want {
			t.Errorf("%s in domain %q: %q, want %q", tt.id, tt.domain, got, tt.want)
		}
	}
}

// tenant is a running Pod whose claim is allocated dev.
func tenant(name string, dev device.ID) (*corev1.Pod, *resourcev1.ResourceClaim) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID(name + "-uid")}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name + "-gpu"}, Status: resourcev1.ResourceClaimStatus{
		Allocation:  &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{Driver: dev.Driver, Pool: dev.Pool, Device: dev.Device, Request: "gpu"}}}},
		ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}}}
	return pod, claim
}

func domainFences(t *testing.T, a *Activities) []string {
	t.Helper()
	list, err := a.Kube.ResourceV1().DeviceTaintRules().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range list.Items {
		if r.Spec.Taint.Key == kubeobj.TaintDomainReset {
			out = append(out, *r.Spec.DeviceSelector.Device)
		}
	}
	slices.Sort(out)
	return out
}

// A reset whose baseboard holds a tenant on another GPU never starts: it waits (and fences
// nothing), or with holders: move names the tenant to be moved and keeps new claims off the
// baseboard's other GPUs. A baseboard with no tenant is fenced, looked at again, and reset.
func TestAResetWaitsForItsDomain(t *testing.T) {
	bad := gpu("node-1", 0)
	pod, claim := tenant("trainer", gpu("node-1", 3))
	in := CheckInput{Device: bad, Domain: "attribute:baseboard", Holders: policy.HoldersWait, WorkflowID: bad.WorkflowID(), Step: "reset"}
	peers := domainPeers([]resourcev1.ResourceSlice{boards("node-1")}, bad, in.Domain)

	_, a, _ := activityEnv(t, pod, claim)
	res, busy, fenced, err := (domains{a}).domainIdle(context.Background(), in, "node-1", []device.ID{bad}, peers, "probes/reset")
	if err != nil || !busy || fenced || !strings.Contains(res.Reason, "claim team/trainer-gpu is still allocated "+gpu("node-1", 3).String()) || len(res.Holders) != 0 {
		t.Fatalf("wait: busy %t fenced %t %+v %v", busy, fenced, res, err)
	}
	if f := domainFences(t, a); len(f) != 0 {
		t.Fatalf("a reset that waits fenced %v", f)
	}

	in.Holders = policy.HoldersMove
	res, busy, fenced, err = (domains{a}).domainIdle(context.Background(), in, "node-1", []device.ID{bad}, peers, "probes/reset")
	if err != nil || !busy || !fenced || !slices.Equal(res.Holders, []string{"team/trainer"}) {
		t.Fatalf("move: busy %t fenced %t %+v %v", busy, fenced, res, err)
	}
	if f := domainFences(t, a); !slices.Equal(f, []string{"gpu-1", "gpu-2", "gpu-3"}) {
		t.Fatalf("fences %v", f)
	}

	_, idle, _ := activityEnv(t)
	if _, busy, _, err := (domains{idle}).domainIdle(context.Background(), in, "node-1", []device.ID{bad}, peers, "probes/reset"); busy || err != nil {
		t.Fatalf("an idle baseboard: busy %t %v", busy, err)
	}
	if f := domainFences(t, idle); len(f) != 3 {
		t.Fatalf("an idle baseboard is reset fenced, got %v", f)
	}
	if err := (domains{idle}).unfenceDomain(context.Background(), "node-1", in.WorkflowID); err != nil || len(domainFences(t, idle)) != 0 {
		t.Fatalf("unfence: %v %v", err, domainFences(t, idle))
	}
}

// A peer's claim whose Pod is gone, not yet deallocated by the claim controller, keeps the
// domain's fences up (lifting them let a waiting Pod take the peer as it freed, and a Pod that
// cannot be moved then held the reset off for good); a form of the device's own unit that holds
// it is waited for unfenced, as no reset moves it.
func TestAReleasingPeerClaimKeepsTheFences(t *testing.T) {
	bad := gpu("node-1", 0)
	in := CheckInput{Device: bad, Domain: "attribute:baseboard", Holders: policy.HoldersMove, WorkflowID: bad.WorkflowID(), Step: "reset"}
	peers := domainPeers([]resourcev1.ResourceSlice{boards("node-1")}, bad, in.Domain)
	released := func(name string, dev device.ID) *resourcev1.ResourceClaim {
		_, claim := tenant(name, dev)
		claim.Status.ReservedFor = nil // its Pod is gone
		return claim
	}

	_, a, _ := activityEnv(t, released("gone", gpu("node-1", 3)))
	a.SettleWait = time.Nanosecond
	res, busy, fenced, err := (domains{a}).domainIdle(context.Background(), in, "node-1", []device.ID{bad}, peers, "probes/reset")
	if err != nil || !busy || !fenced || len(res.Holders) != 0 || !strings.Contains(res.Reason, "claim team/gone-gpu is still allocated") {
		t.Fatalf("a peer's claim being released: busy %t fenced %t %+v %v", busy, fenced, res, err)
	}
	if f := domainFences(t, a); !slices.Equal(f, []string{"gpu-1", "gpu-2", "gpu-3"}) {
		t.Fatalf("fences %v while a peer's claim is released, want the three peers'", f)
	}

	// The device's own unit: another form of it (here named as the step's idle set) holds.
	form := device.ID{Driver: domainDriver, Pool: "node-1", Device: "gpu-0-half"}
	_, b, _ := activityEnv(t, released("form", form))
	b.SettleWait = time.Nanosecond
	res, busy, fenced, err = (domains{b}).domainIdle(context.Background(), in, "node-1", []device.ID{bad, form}, peers, "probes/reset")
	if err != nil || !busy || fenced || len(res.Holders) != 0 {
		t.Fatalf("a form of its own unit: busy %t fenced %t %+v %v", busy, fenced, res, err)
	}
	if f := domainFences(t, b); len(f) != 0 {
		t.Fatalf("fences %v while a form of the device's own unit holds it, want none", f)
	}
}

// A quarantine that ends while its reset moves its domain's holders (a person's release) takes the
// reset's domain fences with it, and leaves another reset's.
func TestReleaseTakesItsDomainFences(t *testing.T) {
	env, a, _ := activityEnv(t)
	bad := gpu("node-1", 0)
	peers := domainPeers([]resourcev1.ResourceSlice{boards("node-1")}, bad, "attribute:baseboard")
	mine := CheckInput{Device: bad, Domain: "attribute:baseboard", WorkflowID: bad.WorkflowID()}
	theirs := CheckInput{Device: gpu("node-1", 4), Domain: mine.Domain, WorkflowID: "device/other"}
	if err := (domains{a}).fenceDomain(context.Background(), mine, "node-1", peers); err != nil {
		t.Fatal(err)
	}
	if err := (domains{a}).fenceDomain(context.Background(), theirs, "node-1", []device.ID{gpu("node-1", 5)}); err != nil {
		t.Fatal(err)
	}
	in := ReleaseInput{Device: bad, Reason: "r", Actor: "ops", Node: "node-1", WorkflowID: bad.WorkflowID(), NodeFence: true}
	if _, err := env.ExecuteActivity(a.ReleaseRule, in); err != nil {
		t.Fatal(err)
	}
	if f := domainFences(t, a); !slices.Equal(f, []string{"gpu-5"}) {
		t.Fatalf("domain fences after the release: %v", f)
	}
}

// RunCheck itself: a reset that moves its domain's holders answers Busy with the domain fenced and
// keeps the domain's permit, so no other device's reset takes the peers the fences hold; one that
// waits for a holder fences nothing and gives the permit back.
func TestRunCheckKeepsThePermitWithItsFences(t *testing.T) {
	bad := gpu("node-1", 0)
	for _, tt := range []struct {
		holders        string
		fences         int
		keepsThePermit bool
	}{
		{policy.HoldersMove, 3, true},
		{policy.HoldersWait, 0, false},
	} {
		t.Run(tt.holders, func(t *testing.T) {
			slice := boards("node-1")
			for i := range slice.Spec.Devices { // the identity a check Pod is pinned by
				slice.Spec.Devices[i].Attributes["index"] = resourcev1.DeviceAttribute{IntValue: ptr.To(int64(i))}
			}
			pod, claim := tenant("trainer", gpu("node-1", 3))
			env, a, _ := activityEnv(t, &slice, pod, claim)
			in := CheckInput{Device: bad, Kind: decide.ActRepair, DeviceClass: domainDriver, Identity: []string{"index"}, Domain: "attribute:baseboard", Holders: tt.holders,
				WorkflowID: bad.WorkflowID(), Step: "reset", Since: time.Now(), Attempts: 1,
				Check: policy.Check{Image: "busybox", Command: []string{"true"}, Timeout: policy.JSONDuration(5 * time.Second), Namespace: "checks"}}
			v, err := env.ExecuteActivity(a.RunCheck, in)
			var res decide.StepResult
			if err == nil {
				err = v.Get(&res)
			}
			if err != nil || !res.Busy {
				t.Fatalf("a reset whose baseboard holds a tenant: %+v %v", res, err)
			}
			if f := domainFences(t, a); len(f) != tt.fences {
				t.Fatalf("domain fences %v, want %d", f, tt.fences)
			}
			p := (domains{a}).permitOf(domainKey([]resourcev1.ResourceSlice{slice}, bad, in.Domain))
			lease, err := a.Kube.CoordinationV1().Leases(p.ns).Get(context.Background(), p.name, metav1.GetOptions{})
			held := err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") == in.WorkflowID
			if held != tt.keepsThePermit {
				t.Fatalf("the try holds the domain's permit: %t, want %t (%v)", held, tt.keepsThePermit, err)
			}
		})
	}
}
