package promsignal

import (
	"strconv"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// Fault is a new fault one series shows.
type Fault struct {
	Signal string
	// Series is the series' identity (the device's labels, and its code label).
	Series string
	Labels map[string]string
	// Code is the cause ("xid:79", "row-remap-failure").
	Code  string
	Value float64
}

// Tracker remembers each signal's last value per series, to tell a new fault from one already
// seen. A "last" or "count" signal's first answer is its baseline: a value that stood before
// DeviceWarden read it is no news (the XID gauge never goes back to zero). A "level" series is a
// fault from the first answer on. Memory: one entry per series and signal.
type Tracker struct {
	last   map[string]map[string]float64
	primed map[string]bool
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{last: map[string]map[string]float64{}, primed: map[string]bool{}}
}

// Observe takes one answer of sig and returns the new faults, and how many samples were refused
// (NaN or infinite values: nothing to read).
func (t *Tracker) Observe(sig policy.PromSignal, samples []Sample) (faults []Fault, refused int) {
	seen := t.last[sig.Name]
	if seen == nil {
		seen = map[string]float64{}
		t.last[sig.Name] = seen
	}
	primed := t.primed[sig.Name]
	present := make(map[string]bool, len(samples))
	for _, s := range samples {
		if !finite(s.Value) {
			refused++
			continue
		}
		id := identity(s.Labels, sig.CodeLabel)
		if present[id] {
			// Two series of one GPU in one answer (its user changed within the lookback): the
			// larger value stands for both.
			if s.Value <= seen[id] {
				continue
			}
			faults = dropSeries(faults, id)
		}
		present[id] = true
		prev, had := seen[id]
		seen[id] = s.Value
		if f, ok := fault(sig, s, prev, had, primed); ok {
			f.Series = id
			faults = append(faults, f)
		}
	}
	if sig.Kind == policy.PromLevel {
		// A level that went is forgotten: when it comes back it is a fault again.
		for id := range seen {
			if !present[id] {
				delete(seen, id)
			}
		}
	}
	t.primed[sig.Name] = true
	return faults, refused
}

// fault says whether one series' value is a new fault of sig.
func fault(sig policy.PromSignal, s Sample, prev float64, had, primed bool) (Fault, bool) {
	f := Fault{Signal: sig.Name, Labels: s.Labels, Value: s.Value, Code: sig.Name}
	switch {
	case sig.CodeLabel != "" && s.Labels[sig.CodeLabel] != "":
		f.Code += ":" + s.Labels[sig.CodeLabel]
	case sig.Kind == policy.PromLast || sig.Kind == policy.PromLevel && s.Value != 1:
		f.Code += ":" + strconv.FormatFloat(s.Value, 'f', -1, 64)
	}
	switch sig.Kind {
	case policy.PromLast:
		return f, primed && s.Value != 0 && (!had || s.Value != prev)
	case policy.PromCount:
		return f, primed && s.Value > 0 && (!had || s.Value > prev)
	default: // level
		return f, !had || s.Value != prev
	}
}

func dropSeries(faults []Fault, id string) []Fault {
	out := faults[:0]
	for _, f := range faults {
		if f.Series != id {
			out = append(out, f)
		}
	}
	return out
}

// Stands says whether a "level" signal's series was in its last answer: the fault it showed
// still stands.
func (t *Tracker) Stands(signal, series string) bool {
	_, ok := t.last[signal][series]
	return ok
}

// Series is how many series the tracker remembers, over every signal.
func (t *Tracker) Series() int {
	n := 0
	for _, m := range t.last {
		n += len(m)
	}
	return n
}
