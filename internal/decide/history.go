package decide

import (
	"slices"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// History is what a device's later runs count of its earlier ones (decision 0008): a run ends
// as soon as its device is idle, so what retireAfter and applicationFaults count is kept outside
// it, in a record per node that a run reads before its first decision on a fault and writes
// before it ends.
type History struct {
	// Closed are the device's closed quarantines within policy.RelapseWindow (retireAfter).
	Closed []ClosedQuarantine `json:"closed,omitempty"`
	// AppFaults are the device's application faults within its policy's window
	// (applicationFaults); AppFaultsTotal counts every one.
	AppFaults      []time.Time `json:"appFaults,omitempty"`
	AppFaultsTotal int         `json:"appFaultsTotal,omitempty"`
	// LastAppFault is the status version of the report that brought the newest application
	// fault counted: the same report sent again (a new leader's relist) is not a second fault.
	LastAppFault string `json:"lastAppFault,omitempty"`
	// Taken are the device's newest one-time words (DeviceState.Taken): a new leader may re-send
	// one after the run that took it ended.
	Taken []string `json:"taken,omitempty"`
}

// ClosedQuarantine is a closed quarantine as History keeps it: when, and what it was for.
type ClosedQuarantine struct {
	CreatedAt time.Time `json:"createdAt"`
	ClosedAt  time.Time `json:"closedAt"`
	State     State     `json:"state,omitempty"`
	Effect    string    `json:"effect,omitempty"`
}

func (q ClosedQuarantine) equal(o ClosedQuarantine) bool {
	return q.CreatedAt.Equal(o.CreatedAt) && q.ClosedAt.Equal(o.ClosedAt) && q.State == o.State && q.Effect == o.Effect
}

// Empty says the history holds nothing a later run would count.
func (h History) Empty() bool {
	return len(h.Closed) == 0 && len(h.AppFaults) == 0 && h.AppFaultsTotal == 0
}

// Equal says h and o hold the same history.
func (h History) Equal(o History) bool {
	return slices.EqualFunc(h.Closed, o.Closed, ClosedQuarantine.equal) && slices.EqualFunc(h.AppFaults, o.AppFaults, time.Time.Equal) &&
		h.AppFaultsTotal == o.AppFaultsTotal && h.LastAppFault == o.LastAppFault && slices.Equal(h.Taken, o.Taken)
}

// Pruned is h less what no policy counts any more at now: closed quarantines older than
// policy.RelapseWindow, application faults older than window. Nothing left but a total is
// nothing: an entry with no dates is dropped.
func (h History) Pruned(now time.Time, window time.Duration) History {
	out := History{AppFaultsTotal: h.AppFaultsTotal, LastAppFault: h.LastAppFault, Taken: h.Taken}
	for _, q := range h.Closed {
		if !q.CreatedAt.Before(now.Add(-policy.RelapseWindow)) {
			out.Closed = append(out.Closed, q)
		}
	}
	for _, at := range h.AppFaults {
		if at.After(now.Add(-window)) {
			out.AppFaults = append(out.AppFaults, at)
		}
	}
	if len(out.Closed) == 0 && len(out.AppFaults) == 0 {
		return History{}
	}
	return out
}

// HistoryOf is what st's later runs should count: its closed quarantines and application faults
// still within their windows at now.
func HistoryOf(st *DeviceState, now time.Time) History {
	h := History{AppFaults: slices.Clone(st.AppFaults), AppFaultsTotal: st.AppFaultsTotal, LastAppFault: st.LastAppFault, Taken: slices.Clone(st.Taken)}
	for _, q := range st.Closed {
		h.Closed = append(h.Closed, ClosedQuarantine{CreatedAt: q.CreatedAt, ClosedAt: q.ClosedAt, State: q.State, Effect: q.Effect})
	}
	return h.Pruned(now, st.Policy.Causes.AppFaultLimit().Window.D())
}

// Recall puts an earlier run's history into a new run's state, before its first decision on a
// fault. What the state holds already stays; a closed quarantine is kept once.
func Recall(st *DeviceState, h History) {
	var recalled []QuarantineRecord
	for _, q := range h.Closed {
		if slices.ContainsFunc(st.Closed, func(c QuarantineRecord) bool { return c.CreatedAt.Equal(q.CreatedAt) }) {
			continue
		}
		recalled = append(recalled, QuarantineRecord{CreatedAt: q.CreatedAt, ClosedAt: q.ClosedAt, State: q.State,
			Effect: q.Effect, ClosedBy: Actor, CloseReason: "closed in an earlier run (the device's history)"})
	}
	st.Closed = append(recalled, st.Closed...)
	if n := len(st.Closed); n > maxClosed {
		st.Closed = st.Closed[n-maxClosed:]
	}
	for _, at := range h.AppFaults {
		if !slices.ContainsFunc(st.AppFaults, at.Equal) {
			st.AppFaults = append(st.AppFaults, at)
		}
	}
	slices.SortFunc(st.AppFaults, time.Time.Compare)
	st.AppFaultsTotal += h.AppFaultsTotal
	if st.LastAppFault == "" {
		st.LastAppFault = h.LastAppFault
	}
	addTaken(st, h.Taken)
}
