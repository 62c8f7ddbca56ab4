package rolloutplan

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// A query with no number to compare (NaN, ±Inf, no samples) is a result of its own: by default it
// fails the gate (NaN > max is false, so it used to pass silently); onNoData pass and wait say
// otherwise, and the report says which gate was decided on no data. The report always encodes.
func TestQueryGateWithoutData(t *testing.T) {
	for _, c := range []struct {
		name     string
		onNoData string
		result   QueryResult
		failed   string
		waiting  bool
		noData   string
	}{
		{"NaN fails by default", "", QueryResult{Value: math.NaN()}, "query q: no data (NaN), onNoData: fail", false, "query q: no data (NaN), onNoData: fail: failed"},
		{"+Inf fails", "fail", QueryResult{Value: math.Inf(1)}, "query q: no data (+Inf), onNoData: fail", false, "query q: no data (+Inf), onNoData: fail: failed"},
		{"-Inf under a max still fails", "", QueryResult{Value: math.Inf(-1)}, "query q: no data (-Inf), onNoData: fail", false, "query q: no data (-Inf), onNoData: fail: failed"},
		{"no samples passes when told", "pass", QueryResult{NoData: "no samples"}, "", false, "query q: no data (no samples), onNoData: pass: passed"},
		{"NaN waits when told", "wait", QueryResult{NoData: "NaN"}, "", true, "query q: no data (NaN), onNoData: wait: waiting"},
		{"a number is compared as before", "wait", QueryResult{Value: 0.5}, "", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := plan()
			p.Phases[0].Gates.Queries = []PromQueryGate{{Name: "q", Query: "histogram_quantile(0.99, x)", Max: floatp(1), OnNoData: c.onNoData}}
			c.result.Name = "q"
			r := Evaluate(p, 0, t0, Snapshot{Now: t0}, []QueryResult{c.result})
			if got := strings.Join(r.Failed, "|"); got != c.failed {
				t.Errorf("failed = %q, want %q", got, c.failed)
			}
			if (len(r.Waiting) > 0) != c.waiting || r.Passed() != (c.failed == "" && !c.waiting) {
				t.Errorf("waiting %q, passed %v", r.Waiting, r.Passed())
			}
			if got := strings.Join(r.NoData, "|"); got != c.noData {
				t.Errorf("noData = %q, want %q", got, c.noData)
			}
			r.Queries[0].Value = 0 // what the activity keeps: NaN and ±Inf never reach the report
			if _, err := json.Marshal(r); err != nil {
				t.Errorf("report does not encode: %v", err)
			}
		})
	}
}

func TestNoDataOf(t *testing.T) {
	for v, want := range map[float64]string{math.NaN(): "NaN", math.Inf(1): "+Inf", math.Inf(-1): "-Inf", 0: "", -3.5: ""} {
		if got := NoDataOf(v); got != want {
			t.Errorf("NoDataOf(%v) = %q, want %q", v, got, want)
		}
	}
}
