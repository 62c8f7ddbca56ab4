package breaker

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// DefaultNodeHold is how long a node's permit lasts when its request gives no Hold.
const DefaultNodeHold = 30 * time.Minute

// acquireNode grants a node step its node's permit: at most Config.Reboots() nodes of one node pool
// hold one at a time, whatever the window. A second device of a node already granted shares the
// permit (the caller found it), so one reboot serves every device of the node. The permit lasts
// until its holder releases it (Release) or until its Hold ends, so a worker that died mid-step
// frees its node pool in the end.
func (b *State) acquireNode(req PermitRequest, key string, now time.Time) PermitResult {
	var nodes []string
	for _, g := range b.Grants {
		if g.Action == Reboot && !g.Until.IsZero() && g.Pool == req.NodePool {
			nodes = append(nodes, strings.TrimPrefix(g.Device, "node:"))
		}
	}
	if max := b.Config.Reboots(); len(nodes) >= max {
		b.Denied++
		sort.Strings(nodes)
		return PermitResult{Reason: fmt.Sprintf("reboot budget spent: %d of node pool %s being rebooted (%s; max %d at a time); the device waits for one to finish",
			len(nodes), poolName(req.NodePool), strings.Join(nodes, ", "), max)}
	}
	hold := req.Hold
	if hold <= 0 {
		hold = DefaultNodeHold
	}
	b.Grants = append(b.Grants, Grant{Device: key, Action: Reboot, At: now, Holder: req.Device.String(), Pool: req.NodePool, Until: now.Add(hold)})
	return PermitResult{Granted: true}
}

// renew extends the node permit Grants[i] that req asks for again to req's hold from now (never
// shortens it): the step asking runs within it.
func (b *State) renew(i int, req PermitRequest, now time.Time) {
	g := &b.Grants[i]
	if !b.RenewsHolds || g.Until.IsZero() || req.Hold <= 0 {
		return
	}
	if until := now.Add(req.Hold); until.After(g.Until) {
		g.Until = until
	}
}

// PermitRelease gives a node's or a reset's permit back: Holder's step ended. Failed says a
// reset ran and did not bring its device back, for Reason (see ResetEnded).
type PermitRelease struct {
	Key    string `json:"key"`
	Holder string `json:"holder"`
	Failed bool   `json:"failed,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Release drops the permit rel names if rel's holder holds it; a device that shared another's
// permit releases nothing. It says whether a permit was dropped.
func (b *State) Release(rel PermitRelease) bool {
	for i, g := range b.Grants {
		if g.Device == rel.Key && g.Holder == rel.Holder && !g.Until.IsZero() {
			b.Grants = append(b.Grants[:i], b.Grants[i+1:]...)
			return true
		}
	}
	return false
}

func poolName(pool string) string {
	if pool == "" {
		return `"" (nodes without a pool label)`
	}
	return pool
}
