package escalation

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
)

func TestNodeEscalatesOnceAtThreshold(t *testing.T) {
	var n NodeState
	alerts := 0
	for i, dev := range []string{"gpu-0", "gpu-1", "gpu-1", "gpu-2", "gpu-3"} {
		alerts += len(n.Fail(NodeFailure{Node: "node-1", Device: dev, State: decide.Quarantined, Threshold: 3}, t0.Add(time.Duration(i)*time.Minute)))
		if i == 2 && n.Escalated {
			t.Fatal("a repeated device counted twice")
		}
	}
	if !n.Escalated || alerts != 1 || len(n.Failed) != 4 || !n.EscalatedAt.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("state %+v alerts %d", n, alerts)
	}
}

// A node condition that names no GPU is recorded and alerted once; it is no failed device and
// never escalates the node by itself.
func TestANodeConditionNamingNoDeviceIsRecorded(t *testing.T) {
	var n NodeState
	c := NodeFailure{Node: "node-1", Condition: "XIDErrors", Message: "XID 79 seen", Threshold: 1}
	acts := n.Fail(c, t0)
	if len(acts) != 1 || acts[0].Level != "warning" || n.Escalated || len(n.Failed) != 0 || len(n.Conditions) != 1 {
		t.Fatalf("acts %v state %+v", acts, n)
	}
	if acts := n.Fail(c, t0); acts != nil {
		t.Fatalf("alerted twice: %v", acts)
	}
	if acts := n.Fail(NodeFailure{Node: "node-1"}, t0); acts != nil || len(n.Conditions) != 1 {
		t.Fatalf("an empty word: %v %+v", acts, n)
	}
}
