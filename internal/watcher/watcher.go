package watcher

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Signaler delivers an observation to the device's workflow, starting it if needed.
type Signaler interface {
	Signal(ctx context.Context, obs api.Observation) error
	// RunningDevices lists devices whose workflows are running, so a restarted watcher re-sends
	// their current state once.
	RunningDevices(ctx context.Context) ([]device.ID, error)
}

// Config configures a Watcher.
type Config struct {
	Kube     kubernetes.Interface
	Signaler Signaler
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	// Workers is how many devices are signalled in parallel.
	Workers int
	// HeartbeatInterval is how often an unchanged device that has a workflow is re-signalled
	// (default 2m, well inside the default 10m heartbeat limit). Zero means the default.
	HeartbeatInterval time.Duration
	// ReportAgeInterval is how often the oldest delivered report's age is measured (default 2s).
	ReportAgeInterval time.Duration
	// Clock returns the current time; tests may replace it.
	Clock func() time.Time
	// Policies says how drivers name devices in CDI IDs and what an ambiguous report does
	// (default: the built-in policy, no CDI styles).
	Policies *policy.Set
	// Alerter, when set, also receives an alert for every ambiguous report (Slack).
	Alerter notify.Alerter
	// Term gives the term that orders this watcher's observations (devicemsg.Seq), taken when Run
	// starts, i.e. when this replica starts to lead: larger than every earlier watcher's
	// (LeaseTerm). Nil: TermBase, for tests of one watcher.
	Term func(context.Context) (int64, error)
	// Reports reads and writes DeviceHealthReports (nil: they are not read). While their API is not
	// served, the watcher looks again every ReportsRecheck (default a minute).
	Reports        dynamic.NamespaceableResourceInterface
	ReportsRecheck time.Duration
	// ReportRetention is how long a report stands after it was observed (or created): older ones
	// are deleted, and their word withdrawn (0: kept until their detector deletes them).
	ReportRetention time.Duration
	// Prometheus, when set, is read for dcgm-exporter's faults (prom.go).
	Prometheus *PromConfig
	// Nodes receives node conditions that name no GPU (conditions.go); nil: they are logged.
	Nodes NodeSignaler
	// WithdrawAfter is how long after a detector's fault was delivered its withdrawal is sent
	// (default 5 s; negative: at once).
	WithdrawAfter time.Duration
}

// Watcher turns pod health reports into device workflow signals. It keeps no informer caches:
// pods that report only Healthy devices without workflows are looked at and forgotten, so a
// healthy fleet costs neither Temporal calls nor memory.
type Watcher struct {
	cfg     Config
	store   *store
	claims  *claimIndex
	outages *nodeOutages
	slices  *sliceIndex
	queue   workqueue.TypedRateLimitingInterface[device.ID]
	// logged remembers resolution failures already logged, so a broken pod logs once per key.
	logged logOnce
	// podMu serialises pod handling between the pod source and claim-driven re-resolution.
	podMu sync.Mutex
	// reports are the DeviceHealthReports taken in (reports.go).
	reports reportIndex
	// statuses are the reports' statuses waiting to be written (report_status.go).
	statuses statusWriter
	// detectorSpoke is set once a detector reported a device (once.go): from then on a Pod that
	// holds a followed device without reporting it is its holder (silentHolders).
	detectorSpoke atomic.Bool
	// synced is closed once claims and pods have been listed.
	synced chan struct{}
	// ctx is Run's context, for the few calls made outside the sources.
	ctx context.Context
}

// New builds a watcher; Run starts it.
func New(cfg Config) *Watcher {
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 2 * time.Minute
	}
	if cfg.Policies == nil {
		cfg.Policies = policy.DefaultSet()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WithdrawAfter == 0 {
		cfg.WithdrawAfter = 5 * time.Second
	}
	if cfg.ReportAgeInterval <= 0 {
		cfg.ReportAgeInterval = 2 * time.Second
	}
	w := &Watcher{
		cfg:     cfg,
		store:   newStore(),
		claims:  newClaimIndex(),
		outages: newNodeOutages(),
		slices:  newSliceIndex(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[device.ID](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[device.ID]{Name: "devicewarden-devices"}),
		synced: make(chan struct{}),
		ctx:    context.Background(),
	}
	w.store.unitOf = w.unitOf
	return w
}

// Run watches until ctx ends. Devices whose workflows are already running are learned first, so
// that after a restart their pods are looked at even when they report Healthy.
func (w *Watcher) Run(ctx context.Context) error {
	w.ctx = ctx
	defer w.queue.ShutDown()
	term, ok := retryStart(ctx, w, "take this watcher's term", w.term)
	if !ok {
		return nil
	}
	(termStart{w.store}).setTerm(term)
	running, ok := retryStart(ctx, w, "list running device workflows", w.cfg.Signaler.RunningDevices)
	if !ok {
		return nil
	}
	w.cfg.Logger.Info("watcher starting", "term", term-TermBase)
	if readsLevels(w.cfg) {
		(termStart{w.store}).standingUnread() // until Prometheus answers, what stands is not known
	}
	w.store.seed(running)
	for _, id := range running {
		w.enqueue(id)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	claimsSynced, podsSynced := make(chan struct{}), make(chan struct{})
	wg.Add(1)
	go func() { defer wg.Done(); podReader{w}.claimSource().run(ctx, claimsSynced) }()
	select {
	case <-claimsSynced:
	case <-ctx.Done():
		return nil
	}
	// Slices before pods: a report of a partition is filed under its physical unit, which the
	// pool's slices say.
	slicesSynced := make(chan struct{})
	wg.Add(1)
	go func() { defer wg.Done(); sliceReader{w}.source().run(ctx, slicesSynced) }()
	select {
	case <-slicesSynced:
	case <-ctx.Done():
		return nil
	}
	wg.Add(1)
	go func() { defer wg.Done(); podReader{w}.podSource().run(ctx, podsSynced) }()
	select {
	case <-podsSynced:
	case <-ctx.Done():
		return nil
	}
	if w.cfg.Reports != nil {
		wg.Add(1)
		go func() { defer wg.Done(); w.writeStatuses(ctx) }()
	}
	nodesSynced, reportsSynced := make(chan struct{}), make(chan struct{})
	wg.Add(3)
	go func() { defer wg.Done(); w.outageSource().run(ctx, nodesSynced) }()
	go func() { defer wg.Done(); w.measureReportAge(ctx, w.cfg.ReportAgeInterval) }()
	go func() { defer wg.Done(); (&reportReader{w: w}).run(ctx, reportsSynced) }()
	// Nothing is sent before every source has listed once: a restarted leader must re-send what
	// is true now (a device missing from its slice is still Unknown), not what it saw change.
	for _, ch := range []chan struct{}{nodesSynced, reportsSynced} {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
	sliceReader{w}.scanMissing()
	close(w.synced)
	wg.Add(1)
	go func() { defer wg.Done(); newPromReader(w).run(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); (&conditionReader{w: w}).run(ctx) }()
	w.cfg.Logger.Info("watcher synced", "workers", w.cfg.Workers, "runningDevices", len(running))
	for i := 0; i < w.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	w.queue.ShutDown()
	return nil
}

// retryStart calls fn until it answers or ctx ends (then ok is false): a Temporal or apiserver
// that is slow or away at start delays the watcher, it never stops it.
func retryStart[T any](ctx context.Context, w *Watcher, what string, fn func(context.Context) (T, error)) (v T, ok bool) {
	backoff := time.Second
	for {
		v, err := fn(ctx)
		if err == nil {
			return v, true
		}
		if ctx.Err() != nil {
			return v, false
		}
		w.cfg.Logger.Warn(what+" failed; retrying", "error", err, "backoff", backoff)
		sleep(ctx, backoff)
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (w *Watcher) term(ctx context.Context) (int64, error) {
	if w.cfg.Term == nil {
		return TermBase, nil
	}
	return w.cfg.Term(ctx)
}

// FollowsDevices reports whether any device this watcher follows has a workflow: false on a
// healthy fleet, where nothing may cost Temporal a call.
func (w *Watcher) FollowsDevices() bool { return (followed{w.store}).signalledAny() }

// Synced reports whether every source has listed once.
func (w *Watcher) Synced() bool {
	select {
	case <-w.synced:
		return true
	default:
		return false
	}
}

// WaitForSync blocks until every source has listed once (or ctx ends).
func (w *Watcher) WaitForSync(ctx context.Context) bool {
	select {
	case <-w.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *Watcher) enqueueAll(ids []device.ID) {
	for _, id := range ids {
		w.enqueue(id)
	}
}

func (w *Watcher) enqueue(id device.ID) {
	w.queue.Add(id)
	w.cfg.Metrics.QueueDepth.Set(float64(w.queue.Len()))
}

func (w *Watcher) processNext(ctx context.Context) bool {
	id, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(id)
	w.cfg.Metrics.QueueDepth.Set(float64(w.queue.Len()))
	var unit *device.Unit
	if device.IsUnitKey(id.Device) {
		g := w.cfg.Policies.Units(id.Driver)
		if u, ok := w.slices.unitByKey(id, g); ok {
			unit = &u
		} else if last := (followed{w.store}).lastUnit(id); last != nil {
			if u, ok := w.slices.successor(*last, g); ok {
				unit = &u
			}
		}
	}
	obs, d := w.store.next(id, w.cfg.Clock(), w.cfg.HeartbeatInterval, unit)
	if d != doSignal {
		switch d {
		case skipDuplicate:
			w.cfg.Metrics.Deduplicated.Inc()
		case skipQuiet:
			// A detector spoke of it a moment ago: its withdrawal goes when it is quiet.
			w.queue.Forget(id)
			w.queue.AddAfter(id, w.store.quietFor(id, w.cfg.Clock()))
			return true
		case skipHealthy:
			// Healthy and never signalled: forget it, so a healthy fleet holds no memory.
			w.cfg.Metrics.SkippedHealthy.Inc()
			w.podMu.Lock()
			w.store.forget(id)
			w.podMu.Unlock()
		}
		w.queue.Forget(id)
		return true
	}
	start := time.Now()
	err := w.cfg.Signaler.Signal(ctx, obs)
	w.cfg.Metrics.SignalSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		w.store.unsent(id)
		w.cfg.Metrics.Signals.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			w.cfg.Logger.Warn("signal device workflow failed; will retry", "device", id.String(), "error", err)
			w.queue.AddRateLimited(id)
		}
		return true
	}
	w.cfg.Metrics.Signals.WithLabelValues("ok").Inc()
	if first := w.store.markSignalled(obs, w.cfg.Clock()); first && unit != nil {
		// Every form's holders belong to the unit's decision, not only the reporters'.
		go w.adoptHoldersOf(unit.DeviceIDs())
	} else if first && !devicemsg.PodHolds(obs.Reporters) {
		// Only a detector spoke (its driver's taint, a report, a DCGM fault): the Pods that hold
		// the device said nothing, and must be known to be moved. Taken in before the fault's
		// word is withdrawn (below): a device nothing reports any more is no longer followed,
		// and its holders would be passed over.
		w.adoptHoldersOf([]device.ID{obs.Device})
	}
	w.queue.Forget(id)
	if keys := w.consume(id); len(keys) > 0 {
		// Its one-time words are the workflow's now: tell it they are withdrawn, a little later,
		// so that a detector that reports the device again and again (a flood) costs one signal
		// a word, the withdrawal riding along with the next. Nothing waits for it: the quarantine
		// stands for the fault, and a detector is no holder.
		w.queue.AddAfter(id, max(w.cfg.WithdrawAfter, 0))
		return true
	}
	if len(obs.Reporters) > 0 {
		// Come back for the next heartbeat; an earlier change re-queues the device anyway.
		w.queue.AddAfter(id, w.cfg.HeartbeatInterval)
	}
	return true
}

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
