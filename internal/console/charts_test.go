package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

// A bar chart scales each day to the largest, from the bottom of the chart, one bar every 22
// pixels, writes every fifth day's date and the last, and names its largest value.
func TestBarChart(t *testing.T) {
	days := make([]day, 7)
	for i := range days {
		days[i] = day{Date: string(rune('a' + i)), Quarantines: i % 3, Releases: 2, FirstPassed: i % 3}
	}
	c := barChart("q", "Q", "", days, func(d day) float64 { return float64(d.Quarantines) }, func(v float64) string { return strings.Repeat("|", int(v)) })
	if c.Top != "||" || len(c.Bars) != 7 {
		t.Fatalf("chart %+v", c)
	}
	for i, b := range c.Bars {
		wantH := (i % 3) * chartHeight / 2
		if b.H != wantH || b.Y != chartHeight-wantH || b.X != i*22 || b.Label != days[i].Date || b.Value != strings.Repeat("|", i%3) ||
			b.Tick != (i == 0 || i == 5 || i == 6) {
			t.Fatalf("bar %d: %+v", i, b)
		}
	}
	if flat := barChart("z", "Z", "", days, func(day) float64 { return 0 }, func(float64) string { return "0" }); flat.Bars[3].H != 0 || flat.Bars[3].Y != chartHeight {
		t.Fatalf("an empty chart: %+v", flat.Bars[3])
	}
	all := charts(trends{Days: days})
	ids := []string{}
	for _, c := range all {
		ids = append(ids, c.ID)
	}
	if strings.Join(ids, ",") != "quarantines,p50,p90,first-probe,device-hours" {
		t.Fatalf("charts %v", ids)
	}
	// The share of releases whose first review passed: 1 of 2 is 50%, 2 of 2 the whole bar.
	fp := all[3]
	if fp.Bars[1].Value != "50%" || fp.Bars[2].Value != "100%" || fp.Bars[2].H != chartHeight || fp.Bars[0].Value != "0%" {
		t.Fatalf("first-probe bars %+v", fp.Bars[:3])
	}
	if noRel := charts(trends{Days: []day{{Releases: 0, FirstPassed: 0}}}); noRel[3].Bars[0].Value != "0%" {
		t.Fatal("a day without releases")
	}
	if seconds(90) != "1m30s" || all[4].Bars[0].Value != "0.0 h" {
		t.Fatalf("formats %q %q", seconds(90), all[4].Bars[0].Value)
	}
}

// The first day starts at midnight 29 days before today's: a quarantine at that instant counts, one
// a moment before does not; data reaching back to that instant covers the 30 days.
func TestTrendsWindowEdges(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	start := time.Date(2026, 11, 4, 0, 0, 0, 0, time.UTC)
	tr := trendsOf(Records{Oldest: start, Quarantines: []Record{{Node: "n", CreatedAt: start, ClosedAt: start.Add(time.Hour)},
		{Node: "m", CreatedAt: start.Add(-time.Nanosecond), ClosedAt: start.Add(-time.Nanosecond)}}}, now)
	if tr.Days[0].Date != "11-04" || tr.Days[0].Quarantines != 1 || tr.Days[0].Releases != 1 || tr.Reach != "the data covers all 30 days" || len(tr.Worst) != 1 {
		t.Fatalf("first day %+v, reach %q, worst %+v", tr.Days[0], tr.Reach, tr.Worst)
	}
	if h := tr.Days[0].DeviceHours; h != 1 {
		t.Fatalf("device-hours %v", h)
	}
	if tr.MaxQ != 1 || tr.MaxP90 != time.Hour || tr.MaxHours != 1 {
		t.Fatalf("maxima %d %s %v", tr.MaxQ, tr.MaxP90, tr.MaxHours)
	}
	// Eleven nodes: the ten worst, ties by name.
	var qs []Record
	for i := range 11 {
		for range 1 + i/5 {
			qs = append(qs, Record{Node: string(rune('a' + i)), CreatedAt: now.Add(-time.Hour)})
		}
	}
	w := trendsOf(Records{Quarantines: qs}, now).Worst
	if len(w) != 10 || w[0] != (nodeCount{"k", 3}) || w[1] != (nodeCount{"f", 2}) || w[5] != (nodeCount{"j", 2}) || w[6] != (nodeCount{"a", 1}) {
		t.Fatalf("worst %+v", w)
	}
	if q := quantile([]time.Duration{3, 1, 2, 4}, 50); q != 3 {
		t.Fatalf("p50 %d", q)
	}
}

// The trends ask the history for the last TrendDays days, at most MaxTrendWorkflows workflows.
func TestTrendsAskForTheirWindow(t *testing.T) {
	var since time.Time
	var max int
	h := historyFunc(func(s time.Time, m int) { since, max = s, m })
	c := &Cache{Fleet: &fakeFleet{}, Cluster: fakeCluster{}, History: h}
	if _, err := c.Trends(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(since); d < TrendDays*24*time.Hour || d > TrendDays*24*time.Hour+time.Minute || max != MaxTrendWorkflows {
		t.Fatalf("asked since %s (%s ago), max %d", since, d, max)
	}
}

type historyFunc func(time.Time, int)

func (h historyFunc) Records(_ context.Context, since time.Time, max int) (Records, error) {
	h(since, max)
	return Records{}, nil
}

// The pages link to the Temporal UI of their namespace ("default" unless set), and to nothing
// without one; a device without a workflow state finds its node (a unit's form too) for Events.
func TestLinksAndNodes(t *testing.T) {
	s := &Server{UIURL: "http://ui/"}
	if s.workflowURL("device/a/b/c") != "http://ui/namespaces/default/workflows/device%2Fa%2Fb%2Fc" {
		t.Fatal(s.workflowURL("device/a/b/c"))
	}
	if (&Server{}).workflowURL("x") != "" || (&Server{}).ui() != "" {
		t.Fatal("links without a UI")
	}
	form := device.ID{Driver: "d", Pool: "p", Device: "mig-1"}
	unit := device.ID{Driver: "d", Pool: "p", Device: "counters=c"}
	s.Cache = &Cache{Fleet: &fakeFleet{}, Cluster: fakeCluster{{Name: "n7", Devices: []device.ID{unit}, Forms: map[device.ID][]device.ID{unit: {form}}}}, Refresh: time.Hour}
	if n := s.nodeOf(context.Background(), form); n != "n7" {
		t.Fatalf("node of a form: %q", n)
	}
	if n := s.nodeOf(context.Background(), device.ID{Driver: "d", Pool: "p", Device: "x"}); n != "" {
		t.Fatalf("node of no device: %q", n)
	}
}
