package bench

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/metrics"
)

func TestEventRatesBusiestFirst(t *testing.T) {
	m := metrics.New()
	m.WatcherEvents.WithLabelValues("pod", "add").Add(7)
	before := watchEvents(m)
	m.WatcherEvents.WithLabelValues("lease", "update").Add(100)
	m.WatcherEvents.WithLabelValues("lease", "add").Add(20)
	m.WatcherEvents.WithLabelValues("node", "update").Add(6)
	m.WatcherEvents.WithLabelValues("slice", "update").Add(6)
	got := eventRates(before, watchEvents(m), 2*time.Second)
	// The Pods' 7 came before: no rate. Kinds of equal rate in name order.
	if want := "lease 60.0, node 3.0, slice 3.0"; got != want {
		t.Fatalf("eventRates = %q, want %q", got, want)
	}
	if got := eventRates(watchEvents(m), watchEvents(m), time.Second); got != "" {
		t.Fatalf("no events, rates %q", got)
	}
	if got := watchEvents(nil); len(got) != 0 {
		t.Fatalf("no metrics, events %v", got)
	}
}
