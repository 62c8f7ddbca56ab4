package watcher

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/promsignal"
)

// PromConfig points the watcher at a Prometheus that scrapes dcgm-exporter. Every Interval it
// asks the policy's queries (policy.Signals) and sends each new fault to its device once, as a
// detector's report: a new XID, a count that grew, a level that appeared. A Prometheus that does
// not answer makes the source stale (a metric and an alert), never a device Unknown: a monitoring
// outage is not a device fault.
type PromConfig struct {
	URL      string
	Interval time.Duration // default 15 s
	Timeout  time.Duration // per query; default 10 s
	Client   *http.Client
}

// promSource is the detector name of faults read from Prometheus.
const promSource = "dcgm"

// promKey is the reporter key of one signal's word about one device for one code: two faults of
// a GPU in one answer (XID 119 and XID 31), or two health watches' levels (MEM and SM), are two
// words, so neither replaces the other and each level stands and goes on its own.
func promKey(signal string, id device.ID, code string) string {
	return "prom:" + signal + "/" + id.String() + "/" + code
}

// promReader is the Prometheus source: it asks the policy's queries every interval and sends each
// new fault to its device, on the watcher's devices and queue.
type promReader struct {
	w *Watcher
	// levels are the level series that showed a fault, by signal, then series.
	levels map[string]map[string]levelRef
}

func newPromReader(w *Watcher) *promReader {
	return &promReader{w: w, levels: map[string]map[string]levelRef{}}
}

// run asks Prometheus every interval until ctx ends.
func (r *promReader) run(ctx context.Context) {
	w := r.w
	c := w.cfg.Prometheus
	if c == nil || c.URL == "" {
		return
	}
	every := c.Interval
	if every <= 0 {
		every = 15 * time.Second
	}
	tracker := promsignal.NewTracker()
	stale := false
	w.cfg.Metrics.SignalSourceUp.WithLabelValues("prometheus").Set(1)
	for ctx.Err() == nil {
		err := r.poll(ctx, tracker)
		switch {
		case err != nil && !stale && ctx.Err() == nil:
			stale = true
			w.cfg.Metrics.SignalSourceUp.WithLabelValues("prometheus").Set(0)
			r.alert(ctx, devicemsg.LevelWarning, "DCGM faults are not read: "+err.Error()+"; no device is marked Unknown for it, and faults are read again once it answers")
		case err == nil && stale:
			stale = false
			w.cfg.Metrics.SignalSourceUp.WithLabelValues("prometheus").Set(1)
			r.alert(ctx, devicemsg.LevelInfo, "DCGM faults are read again from "+c.URL)
		}
		w.cfg.Metrics.SignalSeries.WithLabelValues("prometheus").Set(float64(tracker.Series()))
		sleep(ctx, every)
	}
}

// alert logs a change of the source's state and tells people.
func (r *promReader) alert(ctx context.Context, level, text string) {
	w := r.w
	w.cfg.Logger.Warn("prometheus source: " + text)
	if w.cfg.Alerter != nil {
		_ = w.cfg.Alerter.Alert(ctx, notify.AlertInput{Level: level, Text: "Prometheus source: " + text})
	}
}

// poll asks every query once and sends the new faults. One query that fails makes the poll
// fail (the source is stale), while the others' faults are still sent.
func (r *promReader) poll(ctx context.Context, tracker *promsignal.Tracker) error {
	w := r.w
	sigs := w.cfg.Policies.Signals()
	naming := promsignal.Naming{UUIDAttribute: sigs.UUIDAttribute, IndexAttribute: sigs.IndexAttribute}
	var failed []string
	levelsRead := true      // every level signal answered in full: what stands is known
	var touched []device.ID // sent once the whole answer is stored: one signal per device per poll
	for _, sig := range sigs.Prometheus {
		answer, err := r.query(ctx, promsignal.Query(sig.Query, sig.CodeLabel))
		if err != nil {
			w.cfg.Metrics.SignalQueryErrors.WithLabelValues("prometheus", sig.Name).Inc()
			failed = append(failed, sig.Name+": "+err.Error())
			levelsRead = levelsRead && sig.Kind != policy.PromLevel
			continue
		}
		observe := tracker.Observe
		if answer.Partial {
			// Its faults are faults; a level missing from it may only be missing from the answer.
			observe = tracker.ObservePartial
			w.cfg.Metrics.SignalPartial.WithLabelValues("prometheus", sig.Name).Inc()
			if w.logged.first("prom-partial:"+sig.Name, strings.Join(answer.Warnings, "; ")) {
				w.cfg.Logger.Warn("a partial Prometheus answer: no level is withdrawn on it", "signal", sig.Name, "warnings", answer.Warnings)
			}
		}
		faults, refused := observe(sig, answer.Samples)
		if refused > 0 {
			w.cfg.Metrics.SignalRefused.WithLabelValues("prometheus", "not a number").Add(float64(refused))
		}
		for _, f := range faults {
			touched = append(touched, r.fault(ctx, naming, f, sig.Kind == policy.PromLevel)...)
		}
		if sig.Kind == policy.PromLevel && !answer.Partial {
			r.levelsGone(sig.Name, tracker)
		}
		levelsRead = levelsRead && (sig.Kind != policy.PromLevel || !answer.Partial)
	}
	w.enqueueAll(touched)
	if levelsRead {
		w.enqueueAll(termStart{w.store}.standingRead())
	}
	if len(failed) > 0 {
		return fmt.Errorf("prometheus at %s: %s", w.cfg.Prometheus.URL, strings.Join(failed, "; "))
	}
	return nil
}

// readsLevels says whether the watcher reads standing levels: a Prometheus with a level signal.
func readsLevels(cfg Config) bool {
	if c := cfg.Prometheus; c == nil || c.URL == "" {
		return false
	}
	for _, sig := range cfg.Policies.Signals().Prometheus {
		if sig.Kind == policy.PromLevel {
			return true
		}
	}
	return false
}

// fault stores one fault as a word to the device its series names, or says why it cannot, and
// returns the devices to send.
func (r *promReader) fault(ctx context.Context, naming promsignal.Naming, f promsignal.Fault, level bool) []device.ID {
	w := r.w
	spec, ok := naming.Device(f.Labels)
	if !ok {
		w.cfg.Metrics.SignalRefused.WithLabelValues("prometheus", "names no device").Inc()
		if w.logged.first("prom:"+f.Series, "names no device") {
			w.cfg.Logger.Warn("a DCGM series names no device: no DRA labels, and no Hostname with a UUID or gpu index", "signal", f.Signal, "series", f.Series)
		}
		return nil
	}
	spec.Health, spec.Source, spec.Cause.Code = string(device.Unhealthy), promSource, f.Code
	spec.Message = f.Labels["err_msg"]
	id, node, err := w.resolveReport(ctx, spec)
	if err != nil {
		w.cfg.Metrics.SignalRefused.WithLabelValues("prometheus", "no such device").Inc()
		if w.logged.first("prom:"+f.Series, err.Error()) {
			w.cfg.Logger.Warn("a DCGM fault is not tied to a device", "signal", f.Signal, "series", f.Series, "reason", err.Error())
		}
		return nil
	}
	w.cfg.Metrics.SignalFaults.WithLabelValues("prometheus", f.Signal).Inc()
	key := promKey(f.Signal, id, f.Code)
	once := f.Series + "@" + strconv.FormatFloat(f.Value, 'g', -1, 64) + "@" + strconv.FormatInt(w.cfg.Clock().UnixNano(), 10)
	stands, ids := "", []device.ID(nil)
	if level {
		stands = promSource + ": " + f.Code
		if r.levels[f.Signal] == nil {
			r.levels[f.Signal] = map[string]levelRef{}
		}
		if old, ok := r.levels[f.Signal][f.Series]; ok && old.key != key {
			// The series' level changed: its old value no longer stands.
			ids = w.store.levelGone(old.key, old.id)
		}
		r.levels[f.Signal][f.Series] = levelRef{key: key, id: id}
	}
	return append(ids, w.storeDetectorWord(key, "", id, node, device.Unhealthy, spec, once, stands)...)
}

// levelRef is a level series' word about a device.
type levelRef struct {
	key string
	id  device.ID
}

// levelsGone tells the devices whose level series of signal left its last (complete) answer.
func (r *promReader) levelsGone(signal string, tracker *promsignal.Tracker) {
	for series, l := range r.levels[signal] {
		if !tracker.Stands(signal, series) {
			delete(r.levels[signal], series)
			r.w.enqueueAll(r.w.store.levelGone(l.key, l.id))
		}
	}
}

// query asks one instant query.
func (r *promReader) query(ctx context.Context, query string) (promsignal.Answer, error) {
	c := r.w.cfg.Prometheus
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.URL, "/")+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return promsignal.Answer{}, err
	}
	hc := c.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return promsignal.Answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return promsignal.Answer{}, err
	}
	answer, err := promsignal.ParseAnswer(body)
	if resp.StatusCode != http.StatusOK {
		// Prometheus says why in its JSON (a bad query, an overloaded server); a proxy may not.
		if err == nil {
			return promsignal.Answer{}, fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return promsignal.Answer{}, fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
	}
	return answer, err
}
