package decide

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// TestSimulateLemons runs generated fault histories (faults days apart, each quarantine closed
// by a person deleting its rule) under every retireAfter the policy accepts, and holds the ladder
// to its count: a device is retired as a lemon exactly when its quarantines for a fault within
// the relapse window, the new one included, reach retireAfter (#52, defects 8 and 9).
func TestSimulateLemons(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := ladderPolicy()
		p.Repair.RetireAfter = rapid.IntRange(1, 3*policy.MaxRetireAfter).Draw(rt, "retireAfter")
		if err := p.Validate(); err != nil {
			rt.Skip("the policy refuses it:", err)
		}
		st := NewState(dev, "node-1", p, false)
		st.Follow(trusted)
		now := t0
		var faults []time.Time
		for i := range rapid.IntRange(1, 3*policy.MaxRetireAfter+1).Draw(rt, "faults") {
			now = now.Add(time.Duration(rapid.IntRange(1, 72).Draw(rt, fmt.Sprintf("hours%d", i))) * time.Hour)
			o := obs(device.Unhealthy, 2*i+1, "")
			o.ObservedAt = now
			acts := st.Observe(o, now)
			if len(acts) == 0 || acts[0].Kind != ActTaint {
				rt.Fatalf("fault %d at %s: no fence (%v), state %s", i, now, kinds(acts), st.State)
			}
			st.Report(Result{Action: acts[0], Outcome: Done, Rule: dev.TaintRuleName()}, now)
			faults = append(faults, now)
			recent := 0
			for _, at := range faults {
				if !at.Before(now.Add(-policy.RelapseWindow)) {
					recent++
				}
			}
			if lemon := recent >= p.Repair.RetireAfter; lemon != (st.State == Retired) {
				rt.Fatalf("fault %d: %d quarantines for a fault within %s, retireAfter %d, but the device is %s (%s)",
					i, recent, policy.RelapseWindow, p.Repair.RetireAfter, st.State, st.Transitions[len(st.Transitions)-1].Reason)
			}
			if st.State == Retired {
				return
			}
			// A person deletes the rule: the quarantine ends as their release.
			st.Report(Result{Action: Action{Kind: ActInspectRule}, Outcome: Done, Info: RuleInfo{Name: dev.TaintRuleName(), Actor: "bob"}}, now.Add(time.Minute))
			if st.State != Released {
				rt.Fatalf("fault %d: the rule deleted by hand leaves the device %s", i, st.State)
			}
		}
	})
}
