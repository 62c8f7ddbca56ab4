package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// The trends count each quarantine on the day it began and each release on its day, with the
// day's time back in service, the share of releases whose first review passed, and the device-
// hours out of service split over the days they cover; an open quarantine counts to now.
func TestTrendsPerDay(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	today := now.Truncate(24 * time.Hour)
	r := Records{Read: 3, Oldest: today.AddDate(0, 0, -40), Quarantines: []Record{
		{Node: "n1", CreatedAt: today.Add(-2 * time.Hour), ClosedAt: today.Add(2 * time.Hour), FirstReviewPassed: true}, // 4 h over two days
		{Node: "n1", CreatedAt: today.Add(3 * time.Hour), ClosedAt: today.Add(3*time.Hour + 10*time.Minute)},
		{Node: "n2", CreatedAt: today.Add(10 * time.Hour)}, // open: 2 h until now
		{Node: "n3", CreatedAt: today.AddDate(0, 0, -45), ClosedAt: today.AddDate(0, 0, -44)},
	}}
	tr := trendsOf(r, now)
	last, before := tr.Days[TrendDays-1], tr.Days[TrendDays-2]
	if last.Quarantines != 2 || before.Quarantines != 1 || last.Releases != 2 || last.FirstPassed != 1 {
		t.Fatalf("today %+v, yesterday %+v", last, before)
	}
	if last.P50 != 4*time.Hour || last.P90 != 4*time.Hour || before.P50 != 0 {
		t.Fatalf("time back in service today p50 %s p90 %s", last.P50, last.P90)
	}
	if h := last.DeviceHours; h < 4.16 || h > 4.17 { // 2 h + 10 min + 2 h
		t.Fatalf("device-hours today %.3f", h)
	}
	if before.DeviceHours != 2 {
		t.Fatalf("device-hours yesterday %.3f", before.DeviceHours)
	}
	if len(tr.Worst) != 2 || tr.Worst[0] != (nodeCount{"n1", 2}) || tr.Reach != "the data covers all 30 days" {
		t.Fatalf("worst %+v, reach %q", tr.Worst, tr.Reach)
	}
	r.Oldest = today.AddDate(0, 0, -3)
	if tr := trendsOf(r, now); !strings.Contains(tr.Reach, "reaches back to") {
		t.Fatalf("reach %q", tr.Reach)
	}
	if tr := trendsOf(Records{}, now); !strings.Contains(tr.Reach, "no device workflow ran") {
		t.Fatalf("reach of nothing %q", tr.Reach)
	}
}

// A device's records: its closed quarantines (a first review that passed only without repair
// tries) and its open one.
func TestRecordsOfADevice(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	st := devicemsg.DeviceView{Node: "n1", Quarantine: &devicemsg.QuarantineView{CreatedAt: t0.Add(time.Hour)}, Closed: []devicemsg.QuarantineView{
		{CreatedAt: t0, ClosedAt: t0.Add(time.Minute), Reviews: 1},
		{CreatedAt: t0, ClosedAt: t0.Add(time.Minute), Reviews: 1, Ladder: &devicemsg.LadderView{Tries: []devicemsg.TryView{{Kind: "reset"}}}},
		{CreatedAt: t0, ClosedAt: t0.Add(time.Minute), Reviews: 2}}}
	got := recordsOf(st)
	if len(got) != 4 || !got[0].FirstReviewPassed || got[1].FirstReviewPassed || got[2].FirstReviewPassed || !got[3].ClosedAt.IsZero() || got[3].Node != "n1" {
		t.Fatalf("records %+v", got)
	}
}

type fakeHistory struct {
	reads int
	r     Records
}

func (h *fakeHistory) Records(context.Context, time.Time, int) (Records, error) {
	h.reads++
	return h.r, nil
}

// The trends page draws a chart per figure and the worst nodes, says how far the data reaches,
// and reads the history once a minute however often it is asked.
func TestTrendsPage(t *testing.T) {
	srv, _ := testServer(t)
	_, body := get(t, srv.URL+"/trends")
	if !strings.Contains(body, "no history to read trends from") {
		t.Fatalf("a console without history: %s", body)
	}
	now := time.Now()
	h := &fakeHistory{r: Records{Read: 1, Oldest: now.AddDate(0, 0, -2), Quarantines: []Record{{Node: "node-a", CreatedAt: now.Add(-time.Hour), ClosedAt: now.Add(-time.Minute)}}}}
	s := &Server{Cache: &Cache{Fleet: &fakeFleet{}, Cluster: fakeCluster{}, History: h}}
	hd, err := s.Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv2 := newTestServer(t, hd)
	_, body = get(t, srv2+"/trends")
	for _, want := range []string{`id="chart-quarantines"`, `id="chart-p90"`, `id="chart-first-probe"`, `id="chart-device-hours"`, "reaches back to",
		`<a href="/?node=node-a">node-a</a></td><td>1</td>`, "from 1 device workflows"} {
		if !strings.Contains(body, want) {
			t.Errorf("trends page lacks %q", want)
		}
	}
	get(t, srv2+"/trends")
	if h.reads != 1 {
		t.Fatalf("history read %d times in a minute", h.reads)
	}
}
