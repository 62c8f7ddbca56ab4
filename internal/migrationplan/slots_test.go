package migrationplan

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

func TestSlotsPerNodeAndClusterWide(t *testing.T) {
	var s SlotState
	req := func(id, node string) SlotRequest { return SlotRequest{ID: id, Node: node, PerNode: 1, ClusterWide: 2} }
	steps := []struct {
		do   func() []string
		want string
	}{
		{func() []string { return s.Acquire(req("a", "n1")) }, "a"},
		{func() []string { return s.Acquire(req("b", "n1")) }, ""},  // n1 is full
		{func() []string { return s.Acquire(req("c", "n2")) }, "c"}, // another node goes ahead
		{func() []string { return s.Acquire(req("d", "n3")) }, ""},  // the cluster is full
		{func() []string { return s.Acquire(req("a", "n1")) }, "a"}, // a retried request of a holder
		{func() []string { return s.Acquire(req("b", "n1")) }, ""},  // a retried request keeps its place
		{func() []string { return s.Release("a") }, "b"},            // b was first in line
		{func() []string { return s.Release("nobody") }, ""},        // unknown: nothing changes
		{func() []string { return s.Release("c") }, "d"},            // d fits now
		{func() []string { return s.Release("b") }, ""},             //
		{func() []string { return s.Release("d") }, ""},             //
	}
	for i, st := range steps {
		if got := strings.Join(st.do(), ","); got != st.want {
			t.Fatalf("step %d: granted %q, want %q (state %+v)", i, got, st.want, s)
		}
	}
	if !s.Idle() || s.Granted != 4 || s.MaxOnNode != 1 {
		t.Fatalf("end state %+v", s)
	}
}

func TestSlotsQueuePosition(t *testing.T) {
	var s SlotState
	s.Acquire(SlotRequest{ID: "a", Node: "n", PerNode: 2, ClusterWide: 2})
	s.Acquire(SlotRequest{ID: "b", Node: "n", PerNode: 2, ClusterWide: 2})
	s.Acquire(SlotRequest{ID: "c", Node: "n", PerNode: 2, ClusterWide: 2})
	s.Acquire(SlotRequest{ID: "d", Node: "n", PerNode: 2, ClusterWide: 2})
	if s.Position("a") != 0 || s.Position("c") != 1 || s.Position("d") != 2 || s.MaxOnNode != 2 {
		t.Fatalf("positions a=%d c=%d d=%d max %d", s.Position("a"), s.Position("c"), s.Position("d"), s.MaxOnNode)
	}
	if got := s.Release("c"); len(got) != 0 || s.Position("d") != 1 {
		t.Fatalf("dropping a waiter granted %v; d at %d", got, s.Position("d"))
	}
	// Zero limits (an old policy) still let one through.
	var z SlotState
	if got := z.Acquire(SlotRequest{ID: "x", Node: "n"}); len(got) != 1 {
		t.Fatalf("zero limits granted %v", got)
	}
}

func TestMigrationDecisions(t *testing.T) {
	m := MigrationState{Phase: PhaseMoving}
	if err := m.ValidateDecision(MigrationDecision{Actor: "a"}); err == nil || !strings.Contains(err.Error(), "not waiting for a decision") {
		t.Fatalf("decision while moving: %v", err)
	}
	m.Phase = PhaseWaitingForDecision
	if err := m.ValidateDecision(MigrationDecision{}); err == nil {
		t.Fatal("unsigned decision accepted")
	}
	if err := m.ValidateDecision(MigrationDecision{Actor: "a", Reason: strings.Repeat("r", devicemsg.MaxReason+1)}); err == nil {
		t.Fatal("overlong reason accepted")
	}
	if err := m.ValidateDecision(MigrationDecision{Actor: "a", Reason: strings.Repeat("r", devicemsg.MaxReason)}); err != nil {
		t.Fatal(err)
	}
}

func TestMoveMechanism(t *testing.T) {
	for _, c := range []struct {
		kind       string
		shrinkable bool
		checkpoint string
		want       string
		recover    bool
	}{
		{"Job", false, "none", MoveSuspend, true},
		{"Job", true, "none", MoveEvict, true},
		{"JobSet", false, "annotation", MoveSuspend, true},
		{"JobSet", true, "none", MoveEvict, true},
		{"Deployment", false, "none", MoveEvict, true},
		{"StatefulSet", false, "annotation", MoveEvict, true},
		{"Pod", false, "none", MoveNone, false},
		{"Pod", false, "annotation", MoveNone, true},
	} {
		if got := MoveMechanism(c.kind, c.shrinkable); got != c.want {
			t.Errorf("%s shrinkable=%t: %s, want %s", c.kind, c.shrinkable, got, c.want)
		}
		if got := Recoverable(c.kind, c.checkpoint); got != c.recover {
			t.Errorf("%s checkpoint=%s recoverable %t", c.kind, c.checkpoint, got)
		}
	}
}

func TestSweepReleaseKeepsANewRunsSlot(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var s SlotState
	s.Acquire(SlotRequest{ID: "m", Node: "n", PerNode: 1, ClusterWide: 5, At: t0})
	// What the sweep read before the old run was found gone; then the new run acquires.
	seen := s.Holders[0].At
	s.Acquire(SlotRequest{ID: "m", Node: "n", PerNode: 1, ClusterWide: 5, At: t0.Add(time.Minute)})
	s.Release(ReleaseOf("m", seen))
	if len(s.Holders) != 1 || s.Holders[0].ID != "m" {
		t.Fatalf("the sweep freed the new run's slot: %+v", s.Holders)
	}
	// Without a new acquire the sweep's release frees the slot, as a plain release does.
	s.Release(ReleaseOf("m", s.Holders[0].At))
	if len(s.Holders) != 0 {
		t.Fatalf("the gone run's slot is still held: %+v", s.Holders)
	}
	s.Acquire(SlotRequest{ID: "m", Node: "n", PerNode: 1, ClusterWide: 5, At: t0})
	if s.Release("m"); len(s.Holders) != 0 {
		t.Fatalf("a plain release: %+v", s.Holders)
	}
}

// A finished migration's last step names its outcome, its class when it failed, and why.
func TestFinishNamesTheOutcome(t *testing.T) {
	var m MigrationState
	m.Finish(OutcomeFailed, FailRetryable, "not Ready", t0)
	m2 := MigrationState{}
	m2.Finish(OutcomeMigrated, "", "Ready", t0)
	if m.Steps[0].What != "failed (retryable): not Ready" || m2.Steps[0].What != "migrated: Ready" {
		t.Fatalf("steps %q %q", m.Steps[0].What, m2.Steps[0].What)
	}
}
