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
