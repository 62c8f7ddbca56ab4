package activities

import "testing"

// TestExpectedLeavesOutNodesThePluginNeverAdvertised: a node with no plugin devices recorded at
// enable says nothing about its hardware, so the drift gate must not expect 0 devices there.
func TestExpectedLeavesOutNodesThePluginNeverAdvertised(t *testing.T) {
	c := PhaseChange{Nodes: []NodeChange{{Node: "a", PluginDevices: 8}, {Node: "b"}}}
	got := c.Expected()
	if len(got) != 1 || got["a"] != 8 {
		t.Fatalf("expected = %v", got)
	}
}
