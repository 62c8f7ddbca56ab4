package decide

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// What a run leaves is what a later run counts: quarantines within 30 days, application faults
// within the policy's window; nothing older.
func TestHistoryOfKeepsWhatIsCounted(t *testing.T) {
	p := policy.Default() // application faults: 5 within an hour
	st := NewState(dev, "node-1", p, false)
	st.Closed = []QuarantineRecord{
		{CreatedAt: t0.Add(-31 * 24 * time.Hour), State: Quarantined},
		{CreatedAt: t0.Add(-29 * 24 * time.Hour), ClosedAt: t0.Add(-28 * 24 * time.Hour), State: Restricted, Effect: policy.EffectNoSchedule},
	}
	st.AppFaults, st.AppFaultsTotal, st.LastAppFault = []time.Time{t0.Add(-2 * time.Hour), t0.Add(-time.Minute)}, 7, "42"
	h := HistoryOf(st, t0)
	if len(h.Closed) != 1 || h.Closed[0].State != Restricted || h.Closed[0].Effect != policy.EffectNoSchedule || !h.Closed[0].ClosedAt.Equal(t0.Add(-28*24*time.Hour)) {
		t.Fatalf("closed %+v", h.Closed)
	}
	if len(h.AppFaults) != 1 || !h.AppFaults[0].Equal(t0.Add(-time.Minute)) || h.AppFaultsTotal != 7 || h.LastAppFault != "42" {
		t.Fatalf("application faults %+v", h)
	}
	if got := HistoryOf(st, t0.Add(30*24*time.Hour)); !got.Empty() {
		t.Fatalf("a month later the history is %+v, want nothing", got)
	}
}

// A new run recalls an earlier run's history before its first decision on a fault: the closed
// quarantines count toward retireAfter, the application faults toward their limit, each once.
func TestRecallAddsTheEarlierRuns(t *testing.T) {
	st := NewState(dev, "node-1", policy.Default(), false)
	st.Closed = []QuarantineRecord{{CreatedAt: t0.Add(-time.Hour), State: Quarantined}}
	st.AppFaults, st.AppFaultsTotal = []time.Time{t0}, 1
	h := History{Closed: []ClosedQuarantine{{CreatedAt: t0.Add(-2 * time.Hour), State: Quarantined}, {CreatedAt: t0.Add(-time.Hour), State: Quarantined}},
		AppFaults: []time.Time{t0.Add(-time.Minute), t0}, AppFaultsTotal: 3, LastAppFault: "9"}
	Recall(st, h)
	if len(st.Closed) != 2 || !st.Closed[0].CreatedAt.Equal(t0.Add(-2*time.Hour)) || st.Closed[0].CloseReason == "" {
		t.Fatalf("closed %+v", st.Closed)
	}
	if len(st.AppFaults) != 2 || !st.AppFaults[0].Before(st.AppFaults[1]) || st.AppFaultsTotal != 4 || st.LastAppFault != "9" {
		t.Fatalf("application faults %v total %d last %q", st.AppFaults, st.AppFaultsTotal, st.LastAppFault)
	}
	many := History{}
	for i := range 30 {
		many.Closed = append(many.Closed, ClosedQuarantine{CreatedAt: t0.Add(time.Duration(-i-3) * time.Hour), State: Quarantined})
	}
	Recall(st, many)
	if len(st.Closed) != maxClosed || !st.Closed[maxClosed-1].CreatedAt.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("%d closed kept, the newest %v", len(st.Closed), st.Closed[len(st.Closed)-1].CreatedAt)
	}
}

// Under Rules.History the report that brought an application fault, seen again (a new leader's
// relist, or the next run after the last one ended), is no second fault; another report is.
func TestTheSameReportCountsOnce(t *testing.T) {
	for _, on := range []bool{false, true} {
		st := NewState(dev, "node-1", policy.Default(), false)
		st.Follow(Rules{ReleasePath: true, Causes: true, History: on})
		fault := func(ver string, at time.Time) {
			c := cause.Cause{XID: 13}
			st.Observe(Observation{Device: dev, Health: device.Unhealthy, StatusVersion: ver, Cause: &c,
				Reporters: []Reporter{{Namespace: "ns", Pod: "p"}}}, at)
		}
		fault("10", t0)
		// The run ended; the next one recalls what it left and sees the same report again,
		// and the one after a new report.
		nextRun := func() {
			next := NewState(dev, "node-1", policy.Default(), false)
			next.Follow(st.Rules())
			Recall(next, HistoryOf(st, t0))
			st = next
		}
		nextRun()
		fault("10", t0.Add(time.Minute))
		want := 1
		if !on {
			want = 2
		}
		if st.AppFaultsTotal != want {
			t.Fatalf("History %v: one report counted %d times", on, st.AppFaultsTotal)
		}
		nextRun()
		fault("11", t0.Add(2*time.Minute))
		if st.AppFaultsTotal != want+1 {
			t.Fatalf("History %v: a new report after it counted to %d", on, st.AppFaultsTotal)
		}
	}
}
