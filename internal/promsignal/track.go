package promsignal

import (
	"slices"
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

// Tracker remembers each signal's values per series in its last answer, to tell a new fault
// from one already seen. A "last" or "count" signal's first answer is its baseline: a value that
// stood before DeviceWarden read it is no news (the XID gauge never goes back to zero). A "level"
// series is a fault from the first answer on. One GPU may have several series in one answer (an
// old XID's series still in the lookback beside a new one, or its user changed): they are taken
// together, whatever their order. Memory: one entry per series and signal, with its values.
type Tracker struct {
	last   map[string]map[string][]float64
	primed map[string]bool
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{last: map[string]map[string][]float64{}, primed: map[string]bool{}}
}

// Observe takes one complete answer of sig and returns the new faults, and how many samples were
// refused (NaN or infinite values: nothing to read).
func (t *Tracker) Observe(sig policy.PromSignal, samples []Sample) (faults []Fault, refused int) {
	return t.observe(sig, samples, true)
}

// ObservePartial takes an answer that may miss series (a Thanos or VictoriaMetrics answer that
// says it is partial): its new faults are faults, but a level missing from it has not gone.
func (t *Tracker) ObservePartial(sig policy.PromSignal, samples []Sample) (faults []Fault, refused int) {
	return t.observe(sig, samples, false)
}

func (t *Tracker) observe(sig policy.PromSignal, samples []Sample, complete bool) (faults []Fault, refused int) {
	seen := t.last[sig.Name]
	if seen == nil {
		seen = map[string][]float64{}
		t.last[sig.Name] = seen
	}
	primed := t.primed[sig.Name]
	var order []string
	byID := map[string][]Sample{}
	for _, s := range samples {
		if !finite(s.Value) {
			refused++
			continue
		}
		id := identity(s.Labels, sig.CodeLabel)
		if _, ok := byID[id]; !ok {
			order = append(order, id)
		}
		byID[id] = append(byID[id], s)
	}
	for _, id := range order {
		prev, had := seen[id]
		cur := values(sig.Kind, byID[id])
		for _, v := range cur {
			if !news(sig.Kind, v, prev, had, primed) {
				continue
			}
			f := fault(sig, sampleOf(byID[id], v))
			f.Series = id
			faults = append(faults, f)
		}
		seen[id] = cur
	}
	if sig.Kind == policy.PromLevel && complete {
		// A level that went is forgotten: when it comes back it is a fault again.
		for id := range seen {
			if _, ok := byID[id]; !ok {
				delete(seen, id)
			}
		}
	}
	t.primed[sig.Name] = true
	return faults, refused
}

// values are a series' values in one answer, in order: for a count, the largest (a GPU's
// counter under two users is one counter); else each distinct value.
func values(kind string, samples []Sample) []float64 {
	var out []float64
	for _, s := range samples {
		if !slices.Contains(out, s.Value) {
			out = append(out, s.Value)
		}
	}
	slices.Sort(out)
	if kind == policy.PromCount {
		return out[len(out)-1:]
	}
	return out
}

// news says whether value v of a series is a new fault, given its values in the answer before.
func news(kind string, v float64, prev []float64, had, primed bool) bool {
	switch kind {
	case policy.PromLast:
		return primed && v != 0 && !slices.Contains(prev, v)
	case policy.PromCount:
		return primed && v > 0 && (!had || v > prev[0])
	default: // level
		return !slices.Contains(prev, v)
	}
}

// sampleOf is the first sample of the series with value v.
func sampleOf(samples []Sample, v float64) Sample {
	for _, s := range samples {
		if s.Value == v {
			return s
		}
	}
	return samples[0]
}

// fault is the fault one series' sample shows.
func fault(sig policy.PromSignal, s Sample) Fault {
	f := Fault{Signal: sig.Name, Labels: s.Labels, Value: s.Value, Code: sig.Name}
	switch {
	case sig.CodeLabel != "" && s.Labels[sig.CodeLabel] != "":
		f.Code += ":" + s.Labels[sig.CodeLabel]
	case sig.Kind == policy.PromLast || sig.Kind == policy.PromLevel && s.Value != 1:
		f.Code += ":" + strconv.FormatFloat(s.Value, 'f', -1, 64)
	}
	return f
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
