package console

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// TrendDays is how far back the trends look.
const TrendDays = 30

// History reads the quarantine records of the device workflows that ran in a period: their state
// records, running or closed. Max bounds how many workflows are read.
type History interface {
	Records(ctx context.Context, since time.Time, max int) (Records, error)
}

// Records are quarantine records with their devices' nodes, and how far back they reach.
type Records struct {
	Quarantines []Record
	// Read counts the device workflows read; Capped says more ran in the period than were read.
	Read   int
	Capped bool
	// Oldest is the oldest workflow read: nothing older is known (the namespace's retention).
	Oldest time.Time
}

// Record is one quarantine of one device, open (ClosedAt zero) or closed by a release.
type Record struct {
	Node              string
	CreatedAt         time.Time
	ClosedAt          time.Time
	FirstReviewPassed bool
}

// recordsOf takes a device's quarantines, its current one and its closed ones.
func recordsOf(st devicemsg.DeviceView) []Record {
	var out []Record
	for _, q := range st.Closed {
		out = append(out, Record{Node: st.Node, CreatedAt: q.CreatedAt, ClosedAt: q.ClosedAt,
			FirstReviewPassed: q.Reviews == 1 && (q.Ladder == nil || len(q.Ladder.Tries) == 0)})
	}
	if q := st.Quarantine; q != nil {
		out = append(out, Record{Node: st.Node, CreatedAt: q.CreatedAt})
	}
	return out
}

// day is one day of the trends.
type day struct {
	Date                  string
	Quarantines, Releases int
	FirstPassed           int
	P50, P90              time.Duration
	DeviceHours           float64
}

type nodeCount struct {
	Node string
	N    int
}

// trends are the charts' figures, one row per day, oldest first.
type trends struct {
	Days      []day
	Worst     []nodeCount
	Reach     string
	Read      int
	Capped    bool
	MaxQ      int
	MaxP90    time.Duration
	MaxHours  float64
	Generated string
	at        time.Time
}

// trendsOf counts the records per day over the TrendDays days up to now.
func trendsOf(r Records, now time.Time) trends {
	start := now.UTC().Truncate(24*time.Hour).AddDate(0, 0, -(TrendDays - 1))
	days := make([]day, TrendDays)
	durs := make([][]time.Duration, TrendDays)
	for i := range days {
		days[i].Date = start.AddDate(0, 0, i).Format("01-02")
	}
	index := func(t time.Time) int {
		if t.Before(start) {
			return -1
		}
		return min(int(t.Sub(start)/(24*time.Hour)), TrendDays-1)
	}
	nodes := map[string]int{}
	for _, q := range r.Quarantines {
		if i := index(q.CreatedAt); i >= 0 {
			days[i].Quarantines++
			nodes[q.Node]++
		}
		end := q.ClosedAt
		if end.IsZero() {
			end = now
		} else if i := index(q.ClosedAt); i >= 0 {
			days[i].Releases++
			durs[i] = append(durs[i], q.ClosedAt.Sub(q.CreatedAt))
			if q.FirstReviewPassed {
				days[i].FirstPassed++
			}
		}
		// Out of service: the part of [CreatedAt, end) in each day.
		for i := range days {
			d0 := start.AddDate(0, 0, i)
			d1 := d0.Add(24 * time.Hour)
			if lo, hi := maxTime(q.CreatedAt, d0), minTime(end, d1); hi.After(lo) {
				days[i].DeviceHours += hi.Sub(lo).Hours()
			}
		}
	}
	t := trends{Days: days, Read: r.Read, Capped: r.Capped, Generated: when(now)}
	for i := range days {
		days[i].P50, days[i].P90 = quantile(durs[i], 50), quantile(durs[i], 90)
		t.MaxQ = max(t.MaxQ, days[i].Quarantines)
		t.MaxP90 = max(t.MaxP90, days[i].P90)
		t.MaxHours = max(t.MaxHours, days[i].DeviceHours)
	}
	for n, c := range nodes {
		t.Worst = append(t.Worst, nodeCount{Node: n, N: c})
	}
	sort.Slice(t.Worst, func(i, j int) bool {
		return t.Worst[i].N > t.Worst[j].N || t.Worst[i].N == t.Worst[j].N && t.Worst[i].Node < t.Worst[j].Node
	})
	t.Worst = t.Worst[:min(len(t.Worst), 10)]
	switch {
	case r.Oldest.IsZero():
		t.Reach = "no device workflow ran in the last 30 days"
	case r.Oldest.After(start):
		t.Reach = fmt.Sprintf("the data reaches back to %s (the oldest device workflow Temporal still keeps); the days before are empty for want of data, not of faults", when(r.Oldest))
	default:
		t.Reach = "the data covers all 30 days"
	}
	return t
}

func quantile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
