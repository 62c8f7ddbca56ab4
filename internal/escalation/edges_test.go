package escalation

import (
	"testing"

	"github.com/devicewarden/devicewarden/internal/decide"
)

func TestNodeEscalatesAtItsThreshold(t *testing.T) {
	n := &NodeState{}
	fail := func(dev string, threshold int) []decide.Action {
		return n.Fail(NodeFailure{Node: "node-1", Device: dev, State: decide.Quarantined, Threshold: threshold}, t0)
	}
	if acts := fail("d/node-1/gpu-0", 2); acts != nil || n.Escalated {
		t.Fatalf("one of two: %v", acts)
	}
	if acts := fail("d/node-1/gpu-0", 0); acts != nil || n.Threshold != 2 {
		t.Fatalf("a report without a threshold changed it to %d (%v)", n.Threshold, acts)
	}
	acts := fail("d/node-1/gpu-1", 2)
	if len(acts) != 1 || !n.Escalated || !n.EscalatedAt.Equal(t0) {
		t.Fatalf("two of two: %v, escalated %v", acts, n.Escalated)
	}
	if acts := fail("d/node-1/gpu-2", 2); acts != nil {
		t.Fatalf("escalated twice: %v", acts)
	}
}

// A threshold of 1 escalates at the first failure.
func TestThresholdOfOneEscalatesAtOnce(t *testing.T) {
	var n NodeState
	if acts := n.Fail(NodeFailure{Node: "n", Device: "d/p/g", State: decide.Quarantined, Threshold: 1}, t0); len(acts) != 1 || !n.Escalated {
		t.Fatalf("threshold 1: %v escalated=%v", acts, n.Escalated)
	}
}
