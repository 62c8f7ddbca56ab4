package remediation

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// TestSimulateResetDomains drives the resets of three faulty GPUs of one baseboard (gpu-0..2;
// gpu-3 is their healthy peer) through generated sequences, each GPU's try by the real domain
// activities over one model of the apiserver: tenants land on any GPU no fence keeps them off
// (and, drawn, on a peer in the instant its domain fence is written, as a scheduler that had not
// seen it yet), leave, are moved; tries take or join the domain's permit, wait or move holders,
// start, and end passed or failed; quarantines end while their reset moves holders. Invariants:
//   - no reset starts while any device of its domain other than the resetting one is held;
//   - at most one reset of the domain runs at a time;
//   - a joined try takes the outcome of a reset that started after its device's fault was last
//     left unmended, and had ended;
//   - a domain fence belongs to a try that is moving its holders or running its reset;
//   - a permit never outlives its holder's quarantine unless its reset started.
//
// make simulate runs it longer (SIM_SEAMS: ResetDomains).
func TestSimulateResetDomains(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { newDomainSim(rt).run(rt) })
}

const simNode = "node-1"

type domainTry struct {
	mode    string    // policy.HoldersWait or HoldersMove
	since   time.Time // when the device's fault was last left unmended
	moving  bool      // busy with holders named: the permit and fences stay
	fenced  bool      // busy, its domain's fences kept up (a peer's claim is being released)
	running bool      // its reset started and has not ended
	started time.Time
}

type domainSim struct {
	ctx     context.Context
	kube    *fake.Clientset
	a       *Activities
	tries   map[int]*domainTry // by GPU index: a try under way
	ended   []resetEnd         // resets that ran, in order
	tenants int                // tenants made so far (their names)
	racing  bool               // a tenant lands on the next fenced peer
}

type resetEnd struct {
	by             int
	started, ended time.Time
	passed         bool
}

func newDomainSim(rt *rapid.T) *domainSim {
	s := boards(simNode)
	kube := fake.NewClientset(&s)
	sim := &domainSim{ctx: context.Background(), kube: kube, a: &Activities{Kube: kube, CheckPoll: time.Millisecond, SettleWait: time.Nanosecond}, tries: map[int]*domainTry{}}
	kube.PrependReactor("create", "devicetaintrules", func(action k8stesting.Action) (bool, runtime.Object, error) {
		r := action.(k8stesting.CreateAction).GetObject().(*resourcev1.DeviceTaintRule)
		if sim.racing && r.Spec.Taint.Key == kubeobj.TaintDomainReset {
			sim.racing = false
			i := 0
			_, _ = fmt.Sscanf(*r.Spec.DeviceSelector.Device, "gpu-%d", &i)
			// The fake holds its lock while reacting: the tenant goes to its tracker.
			sim.tenants++
			pod, claim := tenant(fmt.Sprint("tenant-", sim.tenants), gpu(simNode, i))
			if err := kube.Tracker().Add(pod); err != nil {
				return true, nil, err
			}
			if err := kube.Tracker().Add(claim); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
	return sim
}

func (s *domainSim) run(rt *rapid.T) {
	steps := rapid.IntRange(1, 50).Draw(rt, "steps")
	for range steps {
		i := rapid.IntRange(0, 3).Draw(rt, "gpu")
		switch rapid.IntRange(0, 7).Draw(rt, "step") {
		case 0: // a tenant comes, if nothing keeps it off
			if !s.fenced(rt, i) && len(s.claimsOn(rt, i)) == 0 {
				s.land(rt, i)
			}
		case 1: // the GPU's tenants leave
			s.leave(rt, i)
		case 2: // a faulty GPU's try looks (again)
			if i < 3 {
				s.look(rt, i)
			}
		case 3: // a running reset ends
			if t := s.tries[i]; t != nil && t.running {
				s.end(rt, i, rapid.Bool().Draw(rt, "passed"))
			}
		case 4: // the holders a moving try named are moved
			if t := s.tries[i]; t != nil && t.moving {
				for _, p := range domainPeers(s.published(), gpu(simNode, i), "attribute:baseboard") {
					s.leave(rt, gpuIndex(p))
				}
			}
		case 5: // the quarantine ends while its try waits or moves holders (a person's release)
			if t := s.tries[i]; t != nil && !t.running {
				s.must(rt, "release", s.a.ReleaseRule(s.ctx, ReleaseInput{Device: gpu(simNode, i), Node: simNode, NodeFence: true, WorkflowID: gpu(simNode, i).WorkflowID()}))
				delete(s.tries, i)
			}
		case 6: // the next domain fence written races a scheduler that has not seen it
			s.racing = true
		case 7: // the GPU's tenants' Pods go; their claims stay allocated until a leave
			s.podsGo(rt, i)
		}
		s.check(rt)
	}
}

// look is one attempt of GPU i's try: RunCheck's domain part, in its order.
func (s *domainSim) look(rt *rapid.T, i int) {
	id := gpu(simNode, i)
	t := s.tries[i]
	if t == nil {
		t = &domainTry{mode: rapid.SampledFrom([]string{policy.HoldersWait, policy.HoldersMove}).Draw(rt, "holders"), since: time.Now()}
		s.tries[i] = t
	}
	if t.running {
		return
	}
	in := CheckInput{Device: id, Domain: "attribute:baseboard", Holders: t.mode, WorkflowID: id.WorkflowID(), Step: "reset", Since: t.since}
	published := s.published()
	peers := domainPeers(published, id, in.Domain)
	p := (domains{s.a}).permitOf(domainKey(published, id, in.Domain))
	res, joined, err := (domains{s.a}).takeDomain(s.ctx, in, p)
	s.must(rt, "take the permit", err)
	if joined {
		if !res.Busy {
			s.joinedFrom(rt, i, t, res)
			delete(s.tries, i)
		}
		return
	}
	wasFenced := t.mode == policy.HoldersMove && s.fencesOf(rt, id) > 0
	res, busy, fenced, err := (domains{s.a}).domainIdle(s.ctx, in, simNode, []device.ID{id}, peers, "checks/reset-"+id.Device)
	s.must(rt, "look at the domain", err)
	if busy {
		t.moving = len(res.Holders) > 0
		t.fenced = fenced
		if kept := s.fencesOf(rt, id) > 0; kept != fenced {
			rt.Fatalf("gpu-%d's look says fenced %t, its domain fences stand: %t (%s)", i, fenced, kept, res.Reason)
		}
		if wasFenced && !t.fenced {
			// Fences go only for a hold on the device itself: while a peer is still claimed, a
			// Pod would take it as it frees, and the reset must move it again, or cannot.
			for _, peer := range peers {
				if c := s.claimsOn(rt, gpuIndex(peer)); len(c) > 0 {
					rt.Fatalf("the domain fences of gpu-%d's reset went while claim %s/%s still holds its peer %s (%s)", i, c[0].Namespace, c[0].Name, peer.Device, res.Reason)
				}
			}
		}
		if !fenced {
			// RunCheck keeps the permit with the fences: no other reset takes the peers they fence.
			(domains{s.a}).endDomain(s.ctx, in, p, time.Time{}, res, nil)
		}
		return
	}
	// The reset starts: nothing of its domain but the device itself may be held.
	for _, d := range append([]device.ID{id}, peers...) {
		if c := s.claimsOn(rt, gpuIndex(d)); len(c) > 0 {
			rt.Fatalf("the reset of %s starts while claim %s/%s holds %s", id.Device, c[0].Namespace, c[0].Name, d.Device)
		}
	}
	for j, o := range s.tries {
		if o.running {
			rt.Fatalf("the reset of %s starts while gpu-%d's runs", id.Device, j)
		}
	}
	t.moving, t.running, t.started = false, true, time.Now()
	s.must(rt, "mark the reset started", (domains{s.a}).markDomain(s.ctx, in, p, t.started, nil))
}

// end ends GPU i's running reset as RunCheck does: the permit records the outcome, the domain's
// fences go.
func (s *domainSim) end(rt *rapid.T, i int, passed bool) {
	id := gpu(simNode, i)
	t := s.tries[i]
	in := CheckInput{Device: id, Domain: "attribute:baseboard", Holders: t.mode, WorkflowID: id.WorkflowID(), Step: "reset", Since: t.since}
	p := (domains{s.a}).permitOf(domainKey(s.published(), id, in.Domain))
	(domains{s.a}).endDomain(s.ctx, in, p, t.started, decide.StepResult{Passed: passed, Reason: "reset"}, nil)
	s.must(rt, "unfence", (domains{s.a}).unfenceDomain(s.ctx, simNode, in.WorkflowID))
	s.ended = append(s.ended, resetEnd{by: i, started: t.started, ended: time.Now(), passed: passed})
	delete(s.tries, i)
}

// joinedFrom checks a joined try against the resets that ran.
func (s *domainSim) joinedFrom(rt *rapid.T, i int, t *domainTry, res decide.StepResult) {
	for _, e := range slices.Backward(s.ended) {
		if e.by != i && gpu(simNode, e.by).String() == res.Joined && e.started.After(t.since) && e.passed == res.Passed {
			return
		}
	}
	rt.Fatalf("gpu-%d joined %s (%+v), no reset of the domain that started after its fault (%s) ended so: %+v", i, res.Joined, res, t.since, s.ended)
}

func (s *domainSim) check(rt *rapid.T) {
	rules, err := s.kube.ResourceV1().DeviceTaintRules().List(s.ctx, metav1.ListOptions{})
	s.must(rt, "list rules", err)
	for _, r := range rules.Items {
		if r.Spec.Taint.Key != kubeobj.TaintDomainReset {
			continue
		}
		ok := false
		for j, t := range s.tries {
			ok = ok || (t.moving || t.running || t.fenced) && r.Annotations[kubeobj.AnnotationWorkflow] == gpu(simNode, j).WorkflowID()
		}
		if !ok {
			rt.Fatalf("domain fence of %s by %s stands, its try neither moves holders nor resets", *r.Spec.DeviceSelector.Device, r.Annotations[kubeobj.AnnotationWorkflow])
		}
	}
	leases, err := s.kube.CoordinationV1().Leases(kubeobj.Own("")).List(s.ctx, metav1.ListOptions{})
	s.must(rt, "list permits", err)
	for _, l := range leases.Items {
		if l.Annotations[annotationResetStarted] != "" {
			continue
		}
		ok := false
		for j := range s.tries {
			ok = ok || *l.Spec.HolderIdentity == gpu(simNode, j).WorkflowID()
		}
		if !ok {
			rt.Fatalf("permit held by %s outlives its try", *l.Spec.HolderIdentity)
		}
	}
}

func (s *domainSim) land(rt *rapid.T, i int) {
	s.tenants++
	pod, claim := tenant(fmt.Sprint("tenant-", s.tenants), gpu(simNode, i))
	_, err := s.kube.CoreV1().Pods(pod.Namespace).Create(s.ctx, pod, metav1.CreateOptions{})
	s.must(rt, "a tenant's Pod", err)
	_, err = s.kube.ResourceV1().ResourceClaims(claim.Namespace).Create(s.ctx, claim, metav1.CreateOptions{})
	s.must(rt, "a tenant's claim", err)
}

func (s *domainSim) leave(rt *rapid.T, i int) {
	for _, c := range s.claimsOn(rt, i) {
		s.must(rt, "a tenant leaves", s.kube.ResourceV1().ResourceClaims(c.Namespace).Delete(s.ctx, c.Name, metav1.DeleteOptions{}))
		if len(c.Status.ReservedFor) > 0 {
			s.must(rt, "its Pod goes", s.kube.CoreV1().Pods(c.Namespace).Delete(s.ctx, c.Status.ReservedFor[0].Name, metav1.DeleteOptions{}))
		}
	}
}

// podsGo deletes the Pods of GPU i's tenants and leaves their claims allocated, reserved for no
// one: what the claim controller has not released yet.
func (s *domainSim) podsGo(rt *rapid.T, i int) {
	for _, c := range s.claimsOn(rt, i) {
		if len(c.Status.ReservedFor) == 0 {
			continue
		}
		s.must(rt, "a tenant's Pod goes", s.kube.CoreV1().Pods(c.Namespace).Delete(s.ctx, c.Status.ReservedFor[0].Name, metav1.DeleteOptions{}))
		c.Status.ReservedFor = nil
		_, err := s.kube.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(s.ctx, &c, metav1.UpdateOptions{})
		s.must(rt, "its claim reserved for no one", err)
	}
}

// fencesOf counts the domain fences the try of id owns.
func (s *domainSim) fencesOf(rt *rapid.T, id device.ID) int {
	rules, err := s.kube.ResourceV1().DeviceTaintRules().List(s.ctx, metav1.ListOptions{})
	s.must(rt, "list rules", err)
	n := 0
	for _, r := range rules.Items {
		if r.Spec.Taint.Key == kubeobj.TaintDomainReset && r.Annotations[kubeobj.AnnotationWorkflow] == id.WorkflowID() {
			n++
		}
	}
	return n
}

// claimsOn are the tenants' claims allocated GPU i.
func (s *domainSim) claimsOn(rt *rapid.T, i int) []resourcev1.ResourceClaim {
	list, err := s.kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(s.ctx, metav1.ListOptions{})
	s.must(rt, "list claims", err)
	var out []resourcev1.ResourceClaim
	for _, c := range list.Items {
		if c.Status.Allocation != nil && c.Status.Allocation.Devices.Results[0].Device == gpu(simNode, i).Device {
			out = append(out, c)
		}
	}
	return out
}

// fenced says whether a rule keeps new claims off GPU i: a faulty GPU's own quarantine (every
// GPU with a try), or a domain fence.
func (s *domainSim) fenced(rt *rapid.T, i int) bool {
	if s.tries[i] != nil {
		return true
	}
	_, err := s.kube.ResourceV1().DeviceTaintRules().Get(s.ctx, domainFenceName(gpu(simNode, i)), metav1.GetOptions{})
	return err == nil
}

func (s *domainSim) published() []resourcev1.ResourceSlice {
	sl, _ := s.kube.ResourceV1().ResourceSlices().Get(s.ctx, simNode, metav1.GetOptions{})
	return []resourcev1.ResourceSlice{*sl}
}

func (s *domainSim) must(rt *rapid.T, what string, err error) {
	if err != nil {
		rt.Fatalf("%s: %v", what, err)
	}
}

func gpuIndex(id device.ID) int {
	i := 0
	_, _ = fmt.Sscanf(id.Device, "gpu-%d", &i)
	return i
}

// The seam the simulation found: a quarantine that ends while its reset moves the domain's
// holders gives the domain's permit back, so another device's reset need not wait for it to lapse.
func TestAReleaseMidMoveFreesTheDomainPermit(t *testing.T) {
	s := boards(simNode)
	pod, claim := tenant("trainer", gpu(simNode, 3))
	kube := fake.NewClientset(&s, pod, claim)
	a := &Activities{Kube: kube}
	bad := gpu(simNode, 0)
	in := CheckInput{Device: bad, Domain: "attribute:baseboard", Holders: policy.HoldersMove, WorkflowID: bad.WorkflowID(), Step: "reset", Since: time.Now()}
	p := (domains{a}).permitOf(domainKey([]resourcev1.ResourceSlice{s}, bad, in.Domain))
	if _, joined, err := (domains{a}).takeDomain(context.Background(), in, p); joined || err != nil {
		t.Fatalf("take: %v %v", joined, err)
	}
	if err := a.ReleaseRule(context.Background(), ReleaseInput{Device: bad, Node: simNode, NodeFence: true, WorkflowID: bad.WorkflowID()}); err != nil {
		t.Fatal(err)
	}
	other := gpu(simNode, 1)
	in2 := CheckInput{Device: other, Domain: in.Domain, WorkflowID: other.WorkflowID(), Step: "reset", Since: time.Now()}
	if res, joined, err := (domains{a}).takeDomain(context.Background(), in2, p); joined || err != nil {
		t.Fatalf("gpu-1 could not take the permit gpu-0's ended quarantine held: %+v %v", res, err)
	}
}
