package watcher

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// fakeProm answers /api/v1/query from a table the test changes: a query's samples, or a status.
type fakeProm struct {
	mu      sync.Mutex
	answers map[string][]map[string]any
	status  int
	hang    bool
	asked   int
	partial bool // answers carry a warning, as Thanos' do when a store did not answer
}

func (p *fakeProm) setPartial(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = on
}

func testutilValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

func (p *fakeProm) set(query string, samples ...map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answers[query] = samples
}

func (p *fakeProm) polls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

func (p *fakeProm) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	status, hang, samples, partial := p.status, p.hang, p.answers[unwrap(r.URL.Query().Get("query"))], p.partial
	p.asked++
	p.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	if status != 0 {
		http.Error(rw, "upstream failed", status)
		return
	}
	var result []map[string]any
	for _, s := range samples {
		labels := map[string]string{}
		value := "0"
		for k, v := range s {
			if k == "value" {
				value = v.(string)
				continue
			}
			labels[k] = v.(string)
		}
		result = append(result, map[string]any{"metric": labels, "value": []any{float64(time.Now().Unix()), value}})
	}
	rw.Header().Set("Content-Type", "application/json")
	answer := map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}}
	if partial {
		answer["warnings"] = []string{"store 10.0.0.7:10901 timed out"}
	}
	_ = json.NewEncoder(rw).Encode(answer)
}

// promWatcher runs a watcher over node-1's two GPUs reading a fake Prometheus that asks one query:
// the XID gauge.
func promWatcher(t *testing.T) (*recorder, *fakeProm, *metrics.Metrics) {
	t.Helper()
	return promWatcherOf(t, "{name: xid, query: DCGM_FI_DEV_XID_ERRORS, kind: last}")
}

// promWatcherOf is promWatcher asking the one signal given in the policy's words.
func promWatcherOf(t *testing.T, signal string) (*recorder, *fakeProm, *metrics.Metrics) {
	t.Helper()
	pols, err := policy.Parse([]byte("signals:\n  prometheus:\n    - " + signal + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	prom := &fakeProm{answers: map[string][]map[string]any{}}
	rec := &recorder{}
	return rec, prom, promWatcherFor(t, pols, rec, prom)
}

// promWatcherFor starts a watcher with the policies, signaller and Prometheus given, which a test
// may set up before the watcher starts (the workflows running, Prometheus down).
func promWatcherFor(t *testing.T, pols *policy.Set, rec *recorder, prom *fakeProm) *metrics.Metrics {
	t.Helper()
	slice := uuidSlice()
	srv := httptest.NewServer(prom)
	t.Cleanup(srv.Close)
	m := metrics.New()
	w := New(Config{Kube: fake.NewSimpleClientset(slice), Signaler: rec, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 2,
		Policies: pols, Prometheus: &PromConfig{URL: srv.URL, Interval: 10 * time.Millisecond, Timeout: 200 * time.Millisecond}, WithdrawAfter: 10 * time.Millisecond})
	start(t, w)
	return m
}

func xidSample(uuid, value string) map[string]any {
	return map[string]any{"__name__": "DCGM_FI_DEV_XID_ERRORS", "UUID": uuid, "Hostname": "node-1", "gpu": "0", "value": value}
}

// waitPolls waits for n more answers.
func waitPolls(t *testing.T, p *fakeProm, n int) {
	t.Helper()
	from := p.polls()
	waitUntil(t, "prometheus asked", func() bool { return p.polls() >= from+n })
}

// A new XID reaches its GPU once; the XID that stood when the source began is no news; the same
// value again is not a fault.
func TestANewXIDReachesItsGPU(t *testing.T) {
	rec, prom, m := promWatcher(t)
	prom.set("DCGM_FI_DEV_XID_ERRORS", xidSample("GPU-aaaa", "31"), xidSample("GPU-bbbb", "0"))
	waitPolls(t, prom, 3)
	if n := len(rec.signals()); n != 0 {
		t.Fatalf("the baseline was sent: %+v", rec.signals())
	}
	prom.set("DCGM_FI_DEV_XID_ERRORS", xidSample("GPU-aaaa", "31"), xidSample("GPU-bbbb", "79"))
	waitUntil(t, "the fault sent, then withdrawn", func() bool { return len(rec.signals()) == 2 })
	got := rec.signals()[0]
	if got.Device != (device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}) || got.Health != device.Unhealthy || got.Node != "node-1" ||
		len(got.Reporters) != 1 || got.Reporters[0].Detector != "dcgm" || !strings.Contains(got.Message, "dcgm: xid:79") {
		t.Fatalf("signalled %+v", got)
	}
	waitPolls(t, prom, 3)
	if n := len(rec.signals()); n != 2 {
		t.Fatalf("the same XID was sent again: %+v", rec.signals()[2:])
	}
	if v := testutil.ToFloat64(m.SignalFaults.WithLabelValues("prometheus", "xid")); v != 1 {
		t.Fatalf("faults metric %v", v)
	}
}

// A Prometheus that answers 500 or does not answer in time makes the source stale: a metric,
// and no device signalled at all (a monitoring outage is not a device fault); a fault read after
// it answers again is sent.
func TestAPrometheusThatFailsMakesTheSourceStale(t *testing.T) {
	rec, prom, m := promWatcher(t)
	prom.set("DCGM_FI_DEV_XID_ERRORS", xidSample("GPU-aaaa", "0"))
	waitPolls(t, prom, 2)
	for _, fail := range []func(){func() { prom.status = http.StatusInternalServerError }, func() { prom.hang = true }} {
		prom.mu.Lock()
		fail()
		prom.mu.Unlock()
		waitUntil(t, "the source stale", func() bool { return testutil.ToFloat64(m.SignalSourceUp.WithLabelValues("prometheus")) == 0 })
		waitPolls(t, prom, 2)
		prom.mu.Lock()
		prom.status, prom.hang = 0, false
		prom.mu.Unlock()
		waitUntil(t, "the source up again", func() bool { return testutil.ToFloat64(m.SignalSourceUp.WithLabelValues("prometheus")) == 1 })
	}
	if n := len(rec.signals()); n != 0 {
		t.Fatalf("an outage was sent to devices: %+v", rec.signals())
	}
	if v := testutil.ToFloat64(m.SignalQueryErrors.WithLabelValues("prometheus", "xid")); v < 2 {
		t.Fatalf("query errors %v", v)
	}
	prom.set("DCGM_FI_DEV_XID_ERRORS", xidSample("GPU-aaaa", "48"))
	waitUntil(t, "the fault after the outage", func() bool { return len(rec.signals()) >= 1 })
}

// A series that names no device, a UUID no slice publishes and a NaN value are counted and
// logged, and fence nothing.
func TestSeriesThatNameNoDeviceFenceNothing(t *testing.T) {
	rec, prom, m := promWatcher(t)
	noNode := map[string]any{"__name__": "DCGM_FI_DEV_XID_ERRORS", "UUID": "GPU-aaaa", "value": "0"}
	prom.set("DCGM_FI_DEV_XID_ERRORS", noNode, xidSample("GPU-zzzz", "0"), xidSample("GPU-aaaa", "0"))
	waitPolls(t, prom, 2)
	noNode = map[string]any{"__name__": "DCGM_FI_DEV_XID_ERRORS", "UUID": "GPU-aaaa", "value": "79"}
	prom.set("DCGM_FI_DEV_XID_ERRORS", noNode, xidSample("GPU-zzzz", "79"), xidSample("GPU-aaaa", "NaN"))
	waitUntil(t, "each refused", func() bool {
		return testutil.ToFloat64(m.SignalRefused.WithLabelValues("prometheus", "names no device")) == 1 &&
			testutil.ToFloat64(m.SignalRefused.WithLabelValues("prometheus", "no such device")) == 1 &&
			testutil.ToFloat64(m.SignalRefused.WithLabelValues("prometheus", "not a number")) >= 1
	})
	waitPolls(t, prom, 2)
	if n := len(rec.signals()); n != 0 {
		t.Fatalf("signalled %+v", rec.signals())
	}
}

// unwrap is the policy's query inside the aggregation the source asks (promsignal.Query).
func unwrap(q string) string {
	if i := strings.Index(q, ") ("); strings.HasPrefix(q, "max by (") && i > 0 {
		return strings.TrimSuffix(q[i+3:], ")")
	}
	return q
}
