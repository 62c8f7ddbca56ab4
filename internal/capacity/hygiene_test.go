package capacity

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestInspect(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pol := HygienePolicy{LeakTimeout: 10 * time.Minute, StuckTimeout: 15 * time.Minute, DeleteLeaked: true}
	onNode := func(c *resourcev1.ResourceClaim, node string) *resourcev1.ResourceClaim {
		c.ResourceVersion = "42"
		c.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
		return c
	}
	leaked := func(owner types.UID) *resourcev1.ResourceClaim {
		c := onNode(claim("t", "job-0-gpu", "gpu", share{"gpu", "gpu-0", "s1", "8Gi"}), "n1")
		if owner != "" {
			c.Annotations = map[string]string{"resource.kubernetes.io/pod-claim-name": "gpu"}
			c.OwnerReferences = []metav1.OwnerReference{{Kind: "Pod", Name: "job-0", UID: owner}}
		}
		return c
	}
	reserved := func(pod *corev1.Pod) *resourcev1.ResourceClaim {
		c := leaked("")
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		return c
	}
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "t", UID: "p"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	running := pending.DeepCopy()
	running.UID, running.Status.Phase = "r", corev1.PodRunning
	pulling := pending.DeepCopy()
	pulling.UID = "w"
	pulling.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	pods := map[types.UID]*corev1.Pod{"p": pending, "r": running, "w": pulling, "alive": running, "gone": nil, "dead": nil}
	orphaned := leaked("gone")
	orphaned.OwnerReferences = nil // deleted with its dependents orphaned: the owner reference went
	unlooked := leaked("never-looked-up")
	reservedGone := leaked("gone")
	reservedGone.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "job-0", UID: "dead"}}
	reservedOther := leaked("gone")
	reservedOther.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{APIGroup: "example.com", Resource: "jobs", Name: "j", UID: "dead"}}
	deleting := leaked("gone")
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	unallocated := leaked("gone")
	unallocated.Status.Allocation = nil
	cases := []struct {
		name      string
		c         *resourcev1.ResourceClaim
		age       time.Duration
		nodes     map[string]NodeState
		pol       HygienePolicy
		kind      string
		deletable bool
		reason    string
	}{
		{"fresh, unreserved", leaked("gone"), 9 * time.Minute, nil, pol, FindingNone, false, ""},
		{"leaked, template Pod gone", leaked("gone"), 10 * time.Minute, nil, pol, FindingLeaked, true, "Pod that is gone"},
		{"leaked, template Pod alive", leaked("alive"), time.Hour, nil, pol, FindingLeaked, false, "reserved for no Pod"},
		{"leaked, made by hand", leaked(""), time.Hour, nil, pol, FindingLeaked, false, "reserved for no Pod"},
		{"leaked, template, owner reference orphaned", orphaned, time.Hour, nil, pol, FindingLeaked, true, "Pod that is gone"},
		{"leaked, template, owner not looked up", unlooked, time.Hour, nil, pol, FindingLeaked, false, "reserved for no Pod"},
		{"reserved only for a gone Pod", reservedGone, time.Hour, nil, pol, FindingLeaked, true, "reserved only for Pods that are gone"},
		{"reserved for a gone Pod, fresh", reservedGone, time.Minute, nil, pol, FindingNone, false, ""},
		{"reserved for something not a Pod", reservedOther, time.Hour, nil, pol, FindingNone, false, ""},
		{"leaked, policy keeps", leaked("gone"), time.Hour, nil, HygienePolicy{LeakTimeout: time.Minute}, FindingLeaked, false, ""},
		{"node lost, not fenced", leaked("gone"), time.Hour, map[string]NodeState{"n1": {Lost: true}}, pol, FindingNodeLost, false, "until the node returns or is fenced"},
		{"node lost and fenced", leaked("gone"), time.Hour, map[string]NodeState{"n1": {Lost: true, Fenced: true}}, pol, FindingLeaked, true, ""},
		{"stuck Pod", reserved(pending), 15 * time.Minute, nil, pol, FindingStuck, false, "Pod t/p has not started 15m0s"},
		{"slow Pod, not yet stuck", reserved(pending), 14 * time.Minute, nil, pol, FindingNone, false, ""},
		{"running Pod", reserved(running), time.Hour, nil, pol, FindingNone, false, ""},
		{"a container runs", reserved(pulling), time.Hour, nil, pol, FindingNone, false, ""},
		{"stuck on a lost node", reserved(pending), time.Hour, map[string]NodeState{"n1": {Lost: true}}, pol, FindingNodeLost, false, ""},
		{"being deleted", deleting, time.Hour, nil, pol, FindingNone, false, ""},
		{"not allocated", unallocated, time.Hour, nil, pol, FindingNone, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := Inspect(tc.c, now.Add(-tc.age), pods, tc.nodes, tc.pol, now)
			if f.Kind != tc.kind || f.Deletable != tc.deletable || !strings.Contains(f.Reason, tc.reason) {
				t.Fatalf("finding = %+v", f)
			}
			if tc.kind != FindingNone && (f.Version != "42" || f.Node != "n1" || len(f.ShareIDs) != 1 || f.ShareIDs[0] != "s1" || f.UID == "") {
				t.Errorf("the finding lost what it must keep: %+v", f)
			}
		})
	}
	refs := PodsToLook(reservedGone)
	if len(refs) != 2 || refs[0].UID != "dead" || refs[0].Name != "job-0" || refs[0].Namespace != "t" || refs[1].UID != "gone" {
		t.Errorf("pods to look up, consumer and owner: %+v", refs)
	}
	same := reservedGone.DeepCopy()
	same.Status.ReservedFor[0].UID = "gone"
	if refs = PodsToLook(same); len(refs) != 1 {
		t.Errorf("a consumer that is also the owner is looked up once: %+v", refs)
	}
	refs = PodsToLook(reserved(pending))
	if len(refs) != 1 || refs[0].UID != "p" {
		t.Errorf("pods to look up, hand-made claim: %+v", refs)
	}
	if refs = PodsToLook(reservedOther); len(refs) != 1 || refs[0].UID != "gone" {
		t.Errorf("pods to look up, a non-Pod consumer: %+v", refs)
	}
	if n := AllocationNode(&resourcev1.AllocationResult{}); n != "" {
		t.Errorf("no selector: %q", n)
	}
}
