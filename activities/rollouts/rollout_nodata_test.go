package rollouts

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// promAnswering is a Prometheus HTTP API that answers each query with the data it is given.
func promAnswering(t *testing.T, answers map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		data, ok := answers[r.Form.Get("query")]
		if !ok {
			http.Error(w, `{"status":"error","errorType":"bad_data","error":"unknown query"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":` + data + `}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Prometheus answers NaN, +Inf or no sample: the result says so and keeps no such value, so the
// report always encodes; a number is kept as it is.
func TestPromQueriesKeepNoNaN(t *testing.T) {
	addr := promAnswering(t, map[string]string{
		"nan":   `{"resultType":"scalar","result":[1700000000,"NaN"]}`,
		"inf":   `{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"+Inf"]}]}`,
		"empty": `{"resultType":"vector","result":[]}`,
		"two":   `{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1700000000,"1"]},{"metric":{"a":"2"},"value":[1700000000,"2"]}]}`,
		"ok":    `{"resultType":"scalar","result":[1700000000,"0.25"]}`,
	})
	var gates []rolloutplan.PromQueryGate
	for _, q := range []string{"nan", "inf", "empty", "two", "ok"} {
		gates = append(gates, rolloutplan.PromQueryGate{Name: q, Query: q})
	}
	got := (&Activities{}).promQueries(context.Background(), addr, gates, time.Unix(1700000000, 0))
	want := map[string]rolloutplan.QueryResult{
		"nan": {Name: "nan", NoData: "NaN"}, "inf": {Name: "inf", NoData: "+Inf"}, "empty": {Name: "empty", NoData: "no samples"},
		"ok": {Name: "ok", Value: 0.25},
	}
	for _, r := range got {
		if r.Name == "two" {
			if r.Error == "" || r.NoData != "" {
				t.Errorf("two samples: %+v, want an error", r)
			}
			continue
		}
		if r != want[r.Name] {
			t.Errorf("%s: %+v, want %+v", r.Name, r, want[r.Name])
		}
	}
	if _, err := json.Marshal(got); err != nil {
		t.Fatalf("results do not encode: %v", err)
	}
}
