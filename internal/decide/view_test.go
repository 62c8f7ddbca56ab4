package decide

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A run starts from the state carried by the run before, as its JSON; a carried state that does
// not decode stops the run with a clear error instead of starting over; a new run of a shared
// unit knows its forms from the input.
func TestStartTakesTheCarriedState(t *testing.T) {
	id := device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}
	old := NewState(id, "n1", ladderPolicy(), false)
	old.State, old.StatusVersion = Quarantined, "7"
	raw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Start(Input{Carried: raw, Device: id, Node: "other", Policy: policy.Default()}, Rules{Repair: true})
	if err != nil || st.State != Quarantined || st.StatusVersion != "7" || st.Node != "n1" || st.Policy.Name != old.Policy.Name || !st.Rules().Repair {
		t.Fatalf("carried: %+v %v", st, err)
	}
	if _, err := Start(Input{Carried: json.RawMessage(`{"state":`), Device: id}, Rules{}); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("a broken carried state: %v", err)
	}
	u := &device.Unit{Devices: []string{"gpu-0", "gpu-0-half-0"}}
	st, err = Start(Input{Device: id, Node: "n1", Policy: policy.Default(), DryRun: true, Unit: u}, Rules{})
	if err != nil || st.State != Healthy || st.Unit != u || !st.DryRun || st.Node != "n1" || st.Policy.Name != "default" {
		t.Fatalf("new: %+v %v", st, err)
	}
}

// The worker's policy and the migrations started are events: the state takes them, and a
// migration named twice is kept once.
func TestPolicyAndMigrationsAreEvents(t *testing.T) {
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}, "n1", policy.Policy{}, false)
	p := ladderPolicy()
	if acts := Step(st, Event{Kind: EventPolicy, At: t0, Policy: p}); len(acts) != 0 || st.Policy.Name != p.Name {
		t.Fatalf("policy %q, actions %v", st.Policy.Name, acts)
	}
	Step(st, Event{Kind: EventMigrating, At: t0, Migrations: []string{"m1", "m2"}})
	Step(st, Event{Kind: EventMigrating, At: t0, Migrations: []string{"m2", "m3"}})
	if !slices.Equal(st.Migrations, []string{"m1", "m2", "m3"}) {
		t.Fatalf("migrations %v", st.Migrations)
	}
}

// The view says what the state says: its record, its ladder, its review and what comes next.
func TestTheViewShowsTheState(t *testing.T) {
	st, _ := trustedAtFirstStep(t, ladderPolicy())
	st.Held, st.HeldReason, st.LastHeard = &Action{Kind: ActTaint, To: Quarantined}, "breaker open", t0.Add(time.Minute)
	st.Closed = []QuarantineRecord{{RuleName: "old", CreatedAt: t0.Add(-time.Hour), ClosedAt: t0.Add(-time.Minute), ClosedBy: "ops", Reviews: 2,
		Ladder: &Ladder{Tries: []RepairTry{{Kind: policy.RepairReset, Attempt: 1, At: t0.Add(-time.Hour), Review: "passed"}}}}}
	st.Review = &Review{Stage: StageStability, Trigger: "lease", StartedAt: t0, Until: t0.Add(time.Hour), ApprovedBy: "alice"}
	v := Look(st).Device()
	q := st.Quarantine
	if v.Device != st.Device || v.Node != st.Node || v.State != st.State || v.Summary != st.Summary() || v.Next != st.Next() ||
		!v.Withheld || v.HeldReason != "breaker open" || !v.LastHeard.Equal(st.LastHeard) || v.Policy.Name != st.Policy.Name ||
		v.Policy.QuarantineLease != st.Policy.QuarantineLease || v.Policy.StabilityWindow != st.Policy.StabilityWindow ||
		v.Policy.ApprovalRequired != st.Policy.ApprovalRequired || len(v.Reporters) != len(st.Reporters) || len(v.Transitions) != len(st.Transitions) {
		t.Fatalf("view %+v", v)
	}
	if v.Quarantine == nil || v.Quarantine.RuleName != q.RuleName || v.Quarantine.Reason != q.Reason || !v.Quarantine.ExpiresAt.Equal(q.ExpiresAt) ||
		v.Quarantine.Ladder == nil || len(v.Quarantine.Ladder.Tries) != len(q.Ladder.Tries) {
		t.Fatalf("quarantine %+v", v.Quarantine)
	}
	if len(v.Closed) != 1 || v.Closed[0].RuleName != "old" || v.Closed[0].ClosedBy != "ops" || v.Closed[0].Reviews != 2 ||
		len(v.Closed[0].Ladder.Tries) != 1 || v.Closed[0].Ladder.Tries[0].Kind != "reset" || v.Closed[0].Ladder.Tries[0].Review != "passed" {
		t.Fatalf("closed %+v", v.Closed)
	}
	if r := v.Review; r == nil || r.Stage != StageStability || r.Trigger != "lease" || !r.Until.Equal(t0.Add(time.Hour)) || r.ApprovedBy != "alice" {
		t.Fatalf("review %+v", v.Review)
	}
	st.Held = nil
	if Look(st).Device().Withheld {
		t.Fatal("withheld with nothing held")
	}
}
