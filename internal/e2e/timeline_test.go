//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"
)

// timeline records when each test held a slot, so the run's end can say what its wall time went
// to: the in-turn line, the stacks of their own, the tests beside others.
type timeline struct {
	mu    sync.Mutex
	start time.Time
	spans []span
}

type span struct {
	name, kind string
	from, to   time.Duration
}

var ran = &timeline{start: time.Now()}

// begin notes that the named test got its slot; the returned func notes its end.
func (tl *timeline) begin(name, kind string) func() {
	from := time.Since(tl.start)
	return func() {
		to := time.Since(tl.start)
		tl.mu.Lock()
		defer tl.mu.Unlock()
		tl.spans = append(tl.spans, span{name: name, kind: kind, from: from, to: to})
	}
}

// print writes each kind's first start, last end and summed slot time, then every test by its
// start (the figures testdata/lengths.txt holds come from these).
func (tl *timeline) print(w io.Writer) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	type total struct {
		from, to, slots time.Duration
		tests           int
	}
	kinds := map[string]*total{}
	for _, s := range tl.spans {
		k, ok := kinds[s.kind]
		if !ok {
			k = &total{from: s.from, to: s.to}
			kinds[s.kind] = k
		}
		k.from, k.to = min(k.from, s.from), max(k.to, s.to)
		k.slots += s.to - s.from
		k.tests++
	}
	fmt.Fprintf(w, "e2e timeline (seconds since the harness began):\n")
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		k := kinds[kind]
		fmt.Fprintf(w, "  %-13s %2d tests, from %4.0f to %4.0f, %5.0f s in slots\n", kind, k.tests, k.from.Seconds(), k.to.Seconds(), k.slots.Seconds())
	}
	byStart := slices.Clone(tl.spans)
	slices.SortFunc(byStart, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	for _, s := range byStart {
		fmt.Fprintf(w, "  %5.0f s  %-13s %4.0f-%4.0f  %s\n", (s.to - s.from).Seconds(), s.kind, s.from.Seconds(), s.to.Seconds(), s.name)
	}
}
