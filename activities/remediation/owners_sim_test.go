package remediation

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// TestSimulateRuleOwners drives a partitionable GPU's unit workflow and its forms' standalone
// workflows (runs from before the unit was known, the CLI's fallback, forms whose slices were
// deleted) through generated sequences of fences, refreshes and releases over one model of the
// apiserver's rules, the real rule activities doing the writes, while the driver adds, withdraws
// and renames forms. After every step:
//   - every rule has exactly one owner, one of the workflows, which is not also waiting on it;
//   - while any workflow says a form is fenced, the form's rule exists.
//
// make simulate runs it longer (SIM_SEAMS: RuleOwners).
func TestSimulateRuleOwners(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { newOwnersSim().run(rt) })
}

var simUnit = device.ID{Driver: "gpu.example.com", Pool: "node-1", Device: "counters=gpu-0-counters"}

type ownersSim struct {
	ctx   context.Context
	kube  *fake.Clientset
	a     *Activities
	forms []string // the unit's devices as the driver publishes them now
	next  int      // the next new form's number
	// unitSays: the forms the unit's workflow says it fences (its last fence or refresh), nil
	// while it fences nothing; formSays: the forms whose own workflow says they are fenced.
	unitSays []string
	formSays map[string]bool
}

func newOwnersSim() *ownersSim {
	kube := fake.NewClientset()
	return &ownersSim{ctx: context.Background(), kube: kube, a: &Activities{Kube: kube},
		forms: []string{"gpu-0", "gpu-0-mig-0", "gpu-0-mig-1"}, next: 2, formSays: map[string]bool{}}
}

func (s *ownersSim) run(rt *rapid.T) {
	steps := rapid.IntRange(1, 40).Draw(rt, "steps")
	for range steps {
		switch rapid.IntRange(0, 7).Draw(rt, "step") {
		case 0:
			s.must(rt, "unit fences", s.unitFence())
		case 1:
			if s.unitSays != nil {
				s.must(rt, "unit refreshes", s.unitRefresh())
			}
		case 2:
			if s.unitSays != nil {
				s.must(rt, "unit releases", s.a.ReleaseRule(s.ctx, ReleaseInput{Device: simUnit, Members: s.forms, WorkflowID: simUnit.WorkflowID()}))
				s.unitSays = nil
			}
		case 3:
			f := s.form(rt)
			_, err := s.a.Quarantine(s.ctx, s.quarantine(s.formID(f), nil, "operator"))
			s.must(rt, "form "+f+" fences", err)
			s.formSays[f] = true
		case 4:
			f := s.form(rt)
			if s.formSays[f] {
				s.must(rt, "form "+f+" releases", s.a.ReleaseRule(s.ctx, ReleaseInput{Device: s.formID(f), WorkflowID: s.formID(f).WorkflowID()}))
				delete(s.formSays, f)
			}
		case 5:
			s.forms = append(s.forms, fmt.Sprint("gpu-0-mig-", s.next)) // the driver publishes a form
			s.next++
		case 6:
			if len(s.forms) > 1 { // the driver withdraws (or, with case 5, renames) a form
				i := rapid.IntRange(0, len(s.forms)-1).Draw(rt, "withdrawn")
				s.forms = slices.Delete(slices.Clone(s.forms), i, i+1)
			}
		default:
			if s.unitSays != nil {
				s.must(rt, "unit fences again", s.unitFence())
			}
		}
		s.check(rt)
	}
}

func (s *ownersSim) must(rt *rapid.T, what string, err error) {
	if err != nil {
		rt.Fatalf("%s: %v", what, err)
	}
}

func (s *ownersSim) form(rt *rapid.T) string {
	return s.forms[rapid.IntRange(0, len(s.forms)-1).Draw(rt, "form")]
}

func (s *ownersSim) formID(f string) device.ID {
	return device.ID{Driver: simUnit.Driver, Pool: simUnit.Pool, Device: f}
}

func (s *ownersSim) quarantine(id device.ID, members []string, actor string) QuarantineInput {
	return QuarantineInput{Device: id, Members: members, Reason: "sim", Actor: actor, WorkflowID: id.WorkflowID(),
		Effect: resourcev1.DeviceTaintEffectNoExecute, ExpiresAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
}

func (s *ownersSim) unitFence() error {
	_, err := s.a.Quarantine(s.ctx, s.quarantine(simUnit, s.forms, "devicewarden"))
	s.unitSays = slices.Clone(s.forms)
	return err
}

// unitRefresh rewrites the unit's rules with its forms now, fencing those that joined.
func (s *ownersSim) unitRefresh() error {
	res, err := s.a.RefreshRule(s.ctx, s.quarantine(simUnit, s.forms, "devicewarden"))
	if err == nil && res.Missing {
		// Every rule is gone: the workflow records the fence as removed and fences again.
		_, err = s.a.Quarantine(s.ctx, s.quarantine(simUnit, s.forms, "devicewarden"))
	}
	s.unitSays = slices.Clone(s.forms)
	return err
}

func (s *ownersSim) check(rt *rapid.T) {
	rules, err := s.kube.ResourceV1().DeviceTaintRules().List(s.ctx, metav1.ListOptions{})
	if err != nil {
		rt.Fatal(err)
	}
	byDevice := map[string]resourcev1.DeviceTaintRule{}
	for _, r := range rules.Items {
		dev := *r.Spec.DeviceSelector.Device
		owner := r.Annotations[kubeobj.AnnotationWorkflow]
		if owner != simUnit.WorkflowID() && owner != s.formID(dev).WorkflowID() {
			rt.Fatalf("the rule of %s is owned by %q, neither its unit's workflow nor its own", dev, owner)
		}
		if slices.Contains(waiting(&r), owner) {
			rt.Fatalf("the rule of %s: its owner %s also waits on it", dev, owner)
		}
		byDevice[dev] = r
	}
	for f := range s.formSays {
		if _, ok := byDevice[f]; !ok {
			rt.Fatalf("%s's own workflow says it is fenced, but it has no rule", f)
		}
	}
	for _, f := range s.unitSays {
		if _, ok := byDevice[f]; !ok {
			rt.Fatalf("the unit's workflow says %s is fenced, but it has no rule", f)
		}
	}
}
