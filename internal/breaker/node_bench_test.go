package breaker

import (
	"fmt"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

// BenchmarkNodePermit asks for a node's permit with 1,000 node pools each holding one node, and
// 10,000 other grants in the window: the cost a node step's request adds to the breaker.
func BenchmarkNodePermit(b *testing.B) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 100000, MaxReboots: 1}
	st := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true, Config: cfg}
	for i := range 10000 {
		st.Grants = append(st.Grants, Grant{Device: fmt.Sprintf("d/p/gpu-%d", i), Action: "Quarantined", At: t0})
	}
	for i := range 1000 {
		st.Grants = append(st.Grants, Grant{Device: fmt.Sprintf("node:n-%d", i), Action: Reboot, At: t0, Holder: "x", Pool: fmt.Sprintf("pool-%d", i), Until: t0.Add(time.Hour)})
	}
	req := PermitRequest{Device: device.ID{Driver: "d", Pool: "n-x", Device: "gpu-0"}, Action: Reboot, Node: "n-x", NodePool: "pool-500", Hold: time.Hour, Config: cfg}
	b.ReportAllocs()
	for b.Loop() {
		if r := st.Acquire(req, t0); r.Granted {
			b.Fatal("pool-500 holds a node already")
		}
	}
}
