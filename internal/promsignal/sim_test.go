package promsignal

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// simSignals are the signals the tracker simulation asks: the XID gauge (its value is the code),
// the XID counter by code, and health watches as levels by watch.
var simSignals = []policy.PromSignal{
	xid,
	count,
	{Name: "health", Query: "DCGM_FI_DEV_HEALTH_WATCH > 0", Kind: policy.PromLevel, CodeLabel: "watch"},
}

// simSeries is one series the simulation may put in an answer: a GPU and its code label's value.
type simSeries struct{ gpu, code string }

// TestSimulateTracker drives the tracker through generated answers of the shapes Prometheus
// servers give: several series of one signal and GPU in one answer (a new XID's series beside an
// old one still in the lookback, one series twice under two users, two health watches), answers
// that say they are partial, GPUs that come and go. After every answer it checks the tracker
// against what docs/signals.md promises:
//   - exactly the new values fire: an unchanged series never fires again, whatever shares the
//     answer with it, and no new value of a known GPU is dropped beside another;
//   - a "last" or "count" series of a GPU no earlier answer showed is a baseline;
//   - a level stands exactly while its own series is in the answers (one watch passing leaves
//     another failing watch standing), and a partial answer withdraws nothing.
//
// make simulate runs it longer (SIM_SEAMS).
func TestSimulateTracker(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { newTrackerSim().run(rt) })
}

type trackerSim struct {
	tr *Tracker
	// last: each signal's series' distinct values in the last answer that had them; known: the
	// GPUs an answer showed; standing: the level series a complete answer (or a later partial
	// one) showed and no complete answer since lacked.
	last     map[string]map[simSeries][]float64
	known    map[string]map[string]bool
	standing map[simSeries]bool
}

func newTrackerSim() *trackerSim {
	return &trackerSim{tr: NewTracker(), last: map[string]map[simSeries][]float64{}, known: map[string]map[string]bool{}, standing: map[simSeries]bool{}}
}

func (s *trackerSim) run(rt *rapid.T) {
	for i := range rapid.IntRange(1, 40).Draw(rt, "answers") {
		sig := rapid.SampledFrom(simSignals).Draw(rt, fmt.Sprint("signal", i))
		partial := rapid.IntRange(0, 3).Draw(rt, fmt.Sprint("partial", i)) == 0
		samples := s.answer(rt, i, sig)
		want := s.expect(sig, samples, partial)
		var got []Fault
		if partial {
			got, _ = s.tr.ObservePartial(sig, samples)
		} else {
			got, _ = s.tr.Observe(sig, samples)
		}
		if g, w := faultSet(got), strings.Join(want, " "); g != w {
			rt.Fatalf("answer %d (%s, partial %v, %s): fired [%s], want [%s]", i, sig.Name, partial, sampleText(samples), g, w)
		}
		for _, sr := range s.levelSeries() {
			if got, want := s.tr.Stands("health", identity(sr.labels("watch"), "watch")), s.standing[sr]; got != want {
				rt.Fatalf("answer %d (%s, partial %v, %s): %s/%s stands %v, want %v", i, sig.Name, partial, sampleText(samples), sr.gpu, sr.code, got, want)
			}
		}
	}
}

// answer draws one answer of sig: for each GPU and code, no sample, one, or two (two users of
// one counter, or the gauge's old value beside its new one).
func (s *trackerSim) answer(rt *rapid.T, i int, sig policy.PromSignal) []Sample {
	var out []Sample
	for _, sr := range seriesOf(sig) {
		n := rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("samples%d-%s-%s", i, sr.gpu, sr.code))
		for u := range n {
			v := rapid.SampledFrom(valuesOf(sig)).Draw(rt, fmt.Sprintf("value%d-%s-%s-%d", i, sr.gpu, sr.code, u))
			l := sr.labels(sig.CodeLabel)
			l["pod"] = fmt.Sprint("job-", u)
			out = append(out, Sample{Labels: l, Value: v})
		}
	}
	return rapid.Permutation(out).Draw(rt, fmt.Sprint("order", i))
}

func seriesOf(sig policy.PromSignal) []simSeries {
	var codes []string
	switch sig.Name {
	case "xid":
		codes = []string{""}
	case "xid-count":
		codes = []string{"13", "79"}
	default:
		codes = []string{"MEM", "SM"}
	}
	var out []simSeries
	for _, g := range []string{"GPU-a", "GPU-b"} {
		for _, c := range codes {
			out = append(out, simSeries{g, c})
		}
	}
	return out
}

func valuesOf(sig policy.PromSignal) []float64 {
	switch sig.Kind {
	case policy.PromLast:
		return []float64{0, 31, 48, 79, 119}
	case policy.PromCount:
		return []float64{0, 1, 2, 3}
	default:
		return []float64{1, 2}
	}
}

// labels are the series' labels, its code under codeLabel (none when empty).
func (sr simSeries) labels(codeLabel string) map[string]string {
	l := map[string]string{LabelUUID: sr.gpu, LabelHostname: "node-1"}
	if codeLabel != "" {
		l[codeLabel] = sr.code
	}
	return l
}

func (s *trackerSim) levelSeries() []simSeries { return seriesOf(simSignals[2]) }

// expect is what should fire on the answer, by the rules above, and moves the model on.
func (s *trackerSim) expect(sig policy.PromSignal, samples []Sample, partial bool) []string {
	last, known := s.last[sig.Name], s.known[sig.Name]
	if last == nil {
		last, known = map[simSeries][]float64{}, map[string]bool{}
		s.last[sig.Name], s.known[sig.Name] = last, known
	}
	now := map[simSeries][]float64{}
	for _, smp := range samples {
		sr := simSeries{smp.Labels[LabelUUID], smp.Labels[sig.CodeLabel]}
		if !slices.Contains(now[sr], smp.Value) {
			now[sr] = append(now[sr], smp.Value)
		}
	}
	var want []string
	for sr, vs := range now {
		prev, had := last[sr]
		switch sig.Kind {
		case policy.PromLast:
			for _, v := range vs {
				if known[sr.gpu] && v != 0 && !slices.Contains(prev, v) {
					want = append(want, faultText(sig.Name, sr, v))
				}
			}
		case policy.PromCount:
			v := slices.Max(vs)
			if known[sr.gpu] && v > 0 && (!had || v > slices.Max(prev)) {
				want = append(want, faultText(sig.Name, sr, v))
			}
		default:
			for _, v := range vs {
				if !slices.Contains(prev, v) {
					want = append(want, faultText(sig.Name, sr, v))
				}
			}
		}
	}
	for sr, vs := range now {
		last[sr] = vs
	}
	for sr := range now {
		known[sr.gpu] = true
		if sig.Kind == policy.PromLevel {
			s.standing[sr] = true
		}
	}
	if sig.Kind == policy.PromLevel && !partial {
		for sr := range last {
			if _, there := now[sr]; !there {
				delete(last, sr)
				delete(s.standing, sr)
			}
		}
	}
	slices.Sort(want)
	return want
}

func faultText(signal string, sr simSeries, v float64) string {
	return fmt.Sprintf("%s/%s/%s=%g", signal, sr.gpu, sr.code, v)
}

func faultSet(fs []Fault) string {
	var out []string
	for _, f := range fs {
		out = append(out, faultText(f.Signal, simSeries{f.Labels[LabelUUID], codeOf(f)}, f.Value))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// codeOf is the fault's code label's value (empty for the gauge, whose value is its code).
func codeOf(f Fault) string {
	for _, sig := range simSignals {
		if sig.Name == f.Signal && sig.CodeLabel != "" {
			return f.Labels[sig.CodeLabel]
		}
	}
	return ""
}

func sampleText(samples []Sample) string {
	var out []string
	for _, s := range samples {
		out = append(out, fmt.Sprintf("%s/%s/%s=%g", s.Labels[LabelUUID], s.Labels["xid"]+s.Labels["watch"], s.Labels["pod"], s.Value))
	}
	return "[" + strings.Join(out, " ") + "]"
}
