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
// from one already seen. For a "last" or "count" signal, the first answer that shows a GPU is its
// baseline: a value that stood before DeviceWarden read it is no news (the XID gauge never goes back
// to zero), whether the GPU was in the signal's first answer or came later (its exporter was
// restarting when a new leader first asked, or its node joined); a GPU's new series after that (a
// new XID code's counter) is news. A "level" series is a fault from the first answer on. One GPU
// may have several series in one answer (an old XID's series still in the lookback beside a new
// one, or its user changed): they are taken together, whatever their order. A GPU missing from
// ForgetAfter complete answers in a row is forgotten (node churn does not grow the tracker); back
// sooner, its series are compared with what they were. Memory: one entry per series and signal,
// with its values, and one per GPU.
type Tracker struct {
	last map[string]map[string]series
	// gpus are when (the signal's complete answer count) each GPU was last in an answer.
	gpus    map[string]map[string]int
	answers map[string]int
}

// series is one series' values in the last answer that had it, and its GPU.
type series struct {
	values []float64
	gpu    string
}

// ForgetAfter is how many complete answers in a row a GPU may miss before the tracker forgets it:
// an hour at the default 15 s interval.
const ForgetAfter = 240

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{last: map[string]map[string]series{}, gpus: map[string]map[string]int{}, answers: map[string]int{}}
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
	seen, gpus := t.last[sig.Name], t.gpus[sig.Name]
	if seen == nil {
		seen, gpus = map[string]series{}, map[string]int{}
		t.last[sig.Name], t.gpus[sig.Name] = seen, gpus
	}
	if complete {
		t.answers[sig.Name]++
	}
	now := t.answers[sig.Name]
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
	known := map[string]bool{} // the GPUs an earlier answer showed
	for _, id := range order {
		prev, had := seen[id]
		gpu := identity(byID[id][0].Labels, "")
		if _, ok := gpus[gpu]; ok {
			known[gpu] = true
		}
		cur := values(sig.Kind, byID[id])
		for _, v := range cur {
			if !news(sig.Kind, v, prev.values, had, known[gpu]) {
				continue
			}
			f := fault(sig, sampleOf(byID[id], v))
			f.Series = id
			faults = append(faults, f)
		}
		seen[id] = series{values: cur, gpu: gpu}
	}
	for _, id := range order {
		gpus[seen[id].gpu] = now
	}
	if complete {
		t.forget(sig, byID, now)
	}
	return faults, refused
}

// forget drops, after a complete answer, a level that went (when it comes back it is a fault
// again) and a GPU missing from the last ForgetAfter answers.
func (t *Tracker) forget(sig policy.PromSignal, inAnswer map[string][]Sample, now int) {
	seen, gpus := t.last[sig.Name], t.gpus[sig.Name]
	for gpu, at := range gpus {
		if now-at >= ForgetAfter {
			delete(gpus, gpu)
		}
	}
	for id, s := range seen {
		_, there := inAnswer[id]
		_, gpuKnown := gpus[s.gpu]
		if !gpuKnown || sig.Kind == policy.PromLevel && !there {
			delete(seen, id)
		}
	}
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

// news says whether value v of a series is a new fault, given its values in the answer before
// (had: the series was known) and whether an earlier answer showed its GPU.
func news(kind string, v float64, prev []float64, had, gpuKnown bool) bool {
	switch kind {
	case policy.PromLast:
		return gpuKnown && v != 0 && !slices.Contains(prev, v)
	case policy.PromCount:
		return gpuKnown && v > 0 && (!had || v > prev[0])
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

// GPUs is how many GPUs the tracker remembers, over every signal.
func (t *Tracker) GPUs() int {
	n := 0
	for _, m := range t.gpus {
		n += len(m)
	}
	return n
}

// Series is how many series the tracker remembers, over every signal.
func (t *Tracker) Series() int {
	n := 0
	for _, m := range t.last {
		n += len(m)
	}
	return n
}
