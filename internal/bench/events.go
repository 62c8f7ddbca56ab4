package bench

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/metrics"
)

// watchEvents reads the watcher's events so far by kind (pod, lease, node, ...), all actions added.
func watchEvents(m *metrics.Metrics) map[string]float64 {
	by := map[string]float64{}
	if m == nil {
		return by
	}
	fams, err := m.Registry.Gather()
	if err != nil {
		return by
	}
	for _, f := range fams {
		if f.GetName() != "devicewarden_watcher_events_total" {
			continue
		}
		for _, c := range f.GetMetric() {
			for _, l := range c.GetLabel() {
				if l.GetName() == "kind" {
					by[l.GetValue()] += c.GetCounter().GetValue()
				}
			}
		}
	}
	return by
}

// eventRates says how many events of each kind arrived per second between two readings, the
// busiest first ("" when none did).
func eventRates(before, after map[string]float64, d time.Duration) string {
	type rate struct {
		kind string
		n    float64
	}
	var rates []rate
	for kind, n := range after {
		if n -= before[kind]; n > 0 {
			rates = append(rates, rate{kind, n / d.Seconds()})
		}
	}
	sort.Slice(rates, func(i, j int) bool {
		return rates[i].n > rates[j].n || rates[i].n == rates[j].n && rates[i].kind < rates[j].kind
	})
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = fmt.Sprintf("%s %.1f", r.kind, r.n)
	}
	return strings.Join(parts, ", ")
}
