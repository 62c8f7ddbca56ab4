package metrics

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// SDKLabels are the tags the Temporal SDK's metrics keep as labels; every SDK metric carries all
// of them ("" when the SDK did not set one), and other tags are dropped, so each metric has one
// label set whatever handler made it.
var SDKLabels = []string{"namespace", "task_queue", "workflow_type", "activity_type", "operation", "worker_type", "poller_type", "status_code"}

// TemporalHandler exports the Temporal SDK's metrics (temporal_*: requests, polls, task
// latencies, slots) on this registry. Counters are counters, gauges gauges, timers histograms
// in seconds.
func (m *Metrics) TemporalHandler() client.MetricsHandler {
	return &sdkHandler{reg: &sdkRegistry{reg: m.Registry, metrics: map[string]prometheus.Collector{}}, tags: map[string]string{}}
}

type sdkRegistry struct {
	reg     prometheus.Registerer
	mu      sync.Mutex
	metrics map[string]prometheus.Collector
}

// get returns the metric of this name, registering it with mk the first time (a name already
// registered as another kind, or by someone else, gets a nil answer and is not recorded).
func (r *sdkRegistry) get(name string, mk func(string) prometheus.Collector) prometheus.Collector {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.metrics[name]; ok {
		return c
	}
	c := mk(name)
	if err := r.reg.Register(c); err != nil {
		c = nil
	}
	r.metrics[name] = c
	return c
}

type sdkHandler struct {
	reg  *sdkRegistry
	tags map[string]string
}

func (h *sdkHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &sdkHandler{reg: h.reg, tags: merged}
}

func (h *sdkHandler) values() []string {
	out := make([]string, len(SDKLabels))
	for i, l := range SDKLabels {
		out[i] = h.tags[l]
	}
	return out
}

func sdkName(name string) string {
	name = strings.NewReplacer(".", "_", "-", "_").Replace(name)
	if !strings.HasPrefix(name, "temporal_") {
		name = "temporal_" + name
	}
	return name
}

func (h *sdkHandler) Counter(name string) client.MetricsCounter {
	c, _ := h.reg.get(sdkName(name), func(n string) prometheus.Collector {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: n, Help: "Temporal SDK counter " + n + "."}, SDKLabels)
	}).(*prometheus.CounterVec)
	if c == nil {
		return client.MetricsNopHandler.Counter(name)
	}
	counter := c.WithLabelValues(h.values()...)
	return counterFunc(func(d int64) { counter.Add(float64(d)) })
}

func (h *sdkHandler) Gauge(name string) client.MetricsGauge {
	g, _ := h.reg.get(sdkName(name), func(n string) prometheus.Collector {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n, Help: "Temporal SDK gauge " + n + "."}, SDKLabels)
	}).(*prometheus.GaugeVec)
	if g == nil {
		return client.MetricsNopHandler.Gauge(name)
	}
	gauge := g.WithLabelValues(h.values()...)
	return gaugeFunc(func(v float64) { gauge.Set(v) })
}

func (h *sdkHandler) Timer(name string) client.MetricsTimer {
	t, _ := h.reg.get(sdkName(name)+"_seconds", func(n string) prometheus.Collector {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n, Help: "Temporal SDK timer " + n + ".",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, SDKLabels)
	}).(*prometheus.HistogramVec)
	if t == nil {
		return client.MetricsNopHandler.Timer(name)
	}
	obs := t.WithLabelValues(h.values()...)
	return timerFunc(func(d time.Duration) { obs.Observe(d.Seconds()) })
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }
