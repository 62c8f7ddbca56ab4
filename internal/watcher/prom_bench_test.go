package watcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/promsignal"
)

// BenchmarkPrometheusSource10kGPUs is one poll of the default queries over a healthy fleet of
// 10,000 GPUs, as Prometheus answers the source's aggregation of dcgm-exporter's series (the XID gauge and the remapped-rows count answer a
// series per GPU; the filtered and opt-in queries answer none): the HTTP answer, its parse and the
// tracker. It reports the CPU share of one core at a 15 s interval, the memory the source keeps
// (its tracker, after a GC) and the signals sent, which a healthy fleet must keep at zero.
func BenchmarkPrometheusSource10kGPUs(b *testing.B) {
	const gpus = 10000
	series := func() string {
		var sb strings.Builder
		sb.WriteString(`{"status":"success","data":{"resultType":"vector","result":[`)
		for i := range gpus {
			if i > 0 {
				sb.WriteByte(',')
			}
			// What Prometheus answers the source's aggregation (promsignal.Query): the labels
			// that name the GPU, without its user's and its exporter's.
			fmt.Fprintf(&sb, `{"metric":{"Hostname":"node-%d","UUID":"GPU-%08x-0000-1111-2222-333344445555","gpu":"%d"},"value":[1767225600.123,"0"]}`,
				i/8, i, i%8)
		}
		sb.WriteString(`]}}`)
		return sb.String()
	}
	answers := map[string]string{"DCGM_FI_DEV_XID_ERRORS": series(),
		"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": series()}
	empty := `{"status":"success","data":{"resultType":"vector","result":[]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		a, ok := answers[unwrap(r.URL.Query().Get("query"))]
		if !ok {
			a = empty
		}
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, a)
	}))
	defer srv.Close()
	rec := &recorder{}
	w := New(Config{Kube: fake.NewSimpleClientset(), Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Prometheus: &PromConfig{URL: srv.URL, Timeout: 30 * time.Second}})
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tracker, reader := promsignal.NewTracker(), newPromReader(w)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if err := reader.poll(ctx, tracker); err != nil {
			b.Fatal(err)
		}
	}
	per := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := len(rec.signals()); n != 0 || w.queue.Len() != 0 {
		b.Fatalf("a healthy fleet sent %d signals (%d queued)", n, w.queue.Len())
	}
	b.ReportMetric(100*float64(per)/float64(15*time.Second), "%core@15s")
	b.ReportMetric(float64(after.HeapInuse-min(before.HeapInuse, after.HeapInuse))/(1<<20), "MiB-kept")
	b.ReportMetric(float64(tracker.Series()), "series")
	runtime.KeepAlive(tracker)
}
