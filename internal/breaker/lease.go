package breaker

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
)

// Permits leased ahead. Asking the one breaker workflow for every automatic action costs a round
// trip and a workflow task per device; instead the breaker hands a worker a small batch of
// permits along with the permit it asked for, and the worker's devices take from that batch in
// process. The cap stays exact because a leased permit counts as used from the moment it is
// leased until the worker reports it spent (it becomes a Grant naming its device) or returned;
// a worker that dies holding permits never reports, so they count as used for a whole window
// after the lease could last be spent. The breaker never leases more than half of what is still
// free, so other workers are left permits of their own.

// LeaseFor is how long a worker may spend a leased permit; past it, it asks the breaker again
// and returns what it did not spend.
const LeaseFor = 10 * time.Second

// LeaseBatch is the most permits a worker asks for ahead of its devices.
const LeaseBatch = 8

// Lease is a batch of permits the breaker handed one worker.
type Lease struct {
	ID     int64  `json:"id"`
	Worker string `json:"worker"`
	// Queue is the worker's own task queue, where the breaker revokes the lease (a pause).
	Queue  string       `json:"queue,omitempty"`
	Action decide.State `json:"action"`
	// Count is how many of the batch the worker has not yet reported spent or returned.
	Count int       `json:"count"`
	At    time.Time `json:"at"`
	// Until: the worker spends none of the batch after this.
	Until time.Time `json:"until"`
	// Unreachable: a revocation did not reach the worker; the batch counts as used until it
	// leaves the window.
	Unreachable bool `json:"unreachable,omitempty"`
	// Reported is the number of the worker's last report applied to this lease: a report sent
	// again (its signal landed but answered an error) is not counted twice.
	Reported int64 `json:"reported,omitempty"`
	// Ask is the tag of the request that leased it (LeaseRequest.Ask).
	Ask string `json:"ask,omitempty"`
}

// LeaseRequest asks for one permit, as PermitRequest does, and for up to Want more to keep.
type LeaseRequest struct {
	PermitRequest
	Worker string `json:"worker"`
	Queue  string `json:"queue,omitempty"`
	Want   int    `json:"want"`
	// Ask tags the request, unique for the worker: a worker whose call timed out, not knowing
	// whether a lease was made, gives back whatever its Ask leased (LeaseReport.Ask).
	Ask string `json:"ask,omitempty"`
}

// LeaseResult is the breaker's answer: the request's own permit, and a batch when one was leased.
type LeaseResult struct {
	PermitResult
	Lease *Lease `json:"lease,omitempty"`
}

// LeaseReport tells the breaker what became of a lease's permits: the devices that spent them,
// and how many went back unspent.
type LeaseReport struct {
	Worker   string  `json:"worker"`
	Lease    int64   `json:"lease"`
	Spent    []Grant `json:"spent,omitempty"`
	Returned int     `json:"returned,omitempty"`
	// Seq numbers a worker's reports in the order it made them; a report whose Seq the lease
	// already applied is a resend and changes nothing. Zero (a revocation's answer, or a worker
	// from before) is always applied.
	Seq int64 `json:"seq,omitempty"`
	// Ask, with Lease zero, names the lease by the request that made it: its answer never reached
	// the worker, so nothing of it was spent.
	Ask string `json:"ask,omitempty"`
}

// Lease grants the request's permit as Acquire does and, with it, leases up to Want more of the
// same budget: never more than half of what the window still allows.
func (b *State) Lease(req LeaseRequest, now time.Time) LeaseResult {
	res := b.Acquire(req.PermitRequest, now)
	if !res.Granted || res.Reason != "" || req.Want <= 0 || req.Claim != "" {
		return LeaseResult{PermitResult: res}
	}
	budget := b.budget(req.Action)
	free := b.Config.Limit(b.Known) - b.used(budget)
	n := min(req.Want, free/2)
	if n <= 0 {
		return LeaseResult{PermitResult: res}
	}
	b.NextLease++
	l := Lease{ID: b.NextLease, Worker: req.Worker, Queue: req.Queue, Action: req.Action, Count: n, At: now, Until: now.Add(LeaseFor), Ask: req.Ask}
	b.Leases = append(b.Leases, l)
	return LeaseResult{PermitResult: res, Lease: &l}
}

// Report applies what a worker says became of a lease's permits. A spent permit becomes a Grant
// at the time it was spent (never before the lease, never after now), under the action that spent
// it (SpendsOwnAction); a report of more than the lease still holds counts no further, and a
// report applied before (same Seq) counts nothing. A lease with nothing left is forgotten.
func (b *State) Report(r LeaseReport, now time.Time) {
	for i := range b.Leases {
		l := &b.Leases[i]
		if l.Worker != r.Worker || (l.ID != r.Lease && (r.Lease != 0 || r.Ask == "" || l.Ask != r.Ask)) {
			continue
		}
		if r.Seq != 0 && b.SpendsOwnAction {
			if r.Seq <= l.Reported {
				return
			}
			l.Reported = r.Seq
		}
		for _, g := range r.Spent {
			if l.Count == 0 {
				break
			}
			at := g.At
			if at.Before(l.At) || at.After(now) {
				at = now
			}
			b.Grants = append(b.Grants, Grant{Device: g.Device, Action: b.spentAs(l, g), At: at})
			l.Count--
		}
		l.Count = max(0, l.Count-r.Returned)
		if l.Count == 0 {
			b.Leases = append(b.Leases[:i], b.Leases[i+1:]...)
		}
		return
	}
}

// spentAs is the action a spent permit is recorded under: the one that spent it, so a quarantine
// and a migration of one device count as two actions whichever request leased the batch. A batch
// is spent only within its budget; an action of another budget (or none) is recorded as the
// lease's. Runs recorded before SpendsOwnAction record every spend under the lease's action.
func (b *State) spentAs(l *Lease, g Grant) decide.State {
	if !b.SpendsOwnAction || g.Action == "" || b.budget(g.Action) != b.budget(l.Action) {
		return l.Action
	}
	return g.Action
}

// Outstanding lists, by worker queue in the order first leased, the leases a revocation must
// reach: those with permits left that the worker may still spend.
func (b *State) Outstanding(now time.Time) (queues []string, ids map[string][]int64) {
	ids = map[string][]int64{}
	for _, l := range b.Leases {
		if l.Count == 0 || l.Unreachable || !now.Before(l.Until) || l.Queue == "" {
			continue
		}
		if _, ok := ids[l.Queue]; !ok {
			queues = append(queues, l.Queue)
		}
		ids[l.Queue] = append(ids[l.Queue], l.ID)
	}
	return queues, ids
}

// Unreachable marks the leases a revocation could not reach. They count as used until they
// leave the window; SpendableUntil says how long the worker could still spend them.
func (b *State) Unreachable(ids []int64) {
	for i := range b.Leases {
		for _, id := range ids {
			if b.Leases[i].ID == id {
				b.Leases[i].Unreachable = true
			}
		}
	}
}

// SpendableUntil is when the last unreachable lease can no longer be spent; zero when none can.
func (b *State) SpendableUntil(now time.Time) time.Time {
	var last time.Time
	for _, l := range b.Leases {
		if l.Unreachable && l.Count > 0 && now.Before(l.Until) && l.Until.After(last) {
			last = l.Until
		}
	}
	return last
}

// prune drops grants that left the window, and leases that can no longer be spent and whose
// last possible spend left it.
func (b *State) prune(now time.Time) {
	cutoff := now.Add(-b.Config.Window)
	kept := b.Grants[:0]
	for _, g := range b.Grants {
		if g.At.After(cutoff) && g.Until.IsZero() || now.Before(g.Until) {
			kept = append(kept, g)
		} else if b.DeviceBrake && g.Action == Reset && !g.Until.IsZero() {
			b.LapsedResets = append(b.LapsedResets, g)
		}
	}
	b.Grants = kept
	b.pruneLapsed(cutoff)
	leases := b.Leases[:0]
	for _, l := range b.Leases {
		if l.Until.After(cutoff) {
			leases = append(leases, l)
		}
	}
	b.Leases = leases
}

// used counts a budget's grants in the window and the permits leased for it and not yet reported.
func (b *State) used(budget string) int {
	n := 0
	for _, g := range b.Grants {
		if b.budget(g.Action) == budget {
			n++
		}
	}
	for _, l := range b.Leases {
		if b.budget(l.Action) == budget {
			n += l.Count
		}
	}
	return n
}
