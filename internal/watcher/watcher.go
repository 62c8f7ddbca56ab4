package watcher

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/workflows"
)

// Signaler delivers an observation to the device's workflow, starting it if needed.
type Signaler interface {
	Signal(ctx context.Context, obs workflows.Observation) error
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
	// Clock returns the current time; tests may replace it.
	Clock func() time.Time
}

// Watcher turns pod health reports into device workflow signals.
type Watcher struct {
	cfg     Config
	store   *store
	queue   workqueue.TypedRateLimitingInterface[device.ID]
	pods    cache.SharedIndexInformer
	claims  cache.SharedIndexInformer
	factory informers.SharedInformerFactory
	// logged remembers resolution failures already logged, so a broken pod logs once per key.
	logged sync.Map
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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watcher{
		cfg:   cfg,
		store: newStore(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[device.ID](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[device.ID]{Name: "devicewarden-devices"}),
	}
	w.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithTransform(strip))
	w.pods = w.factory.Core().V1().Pods().Informer()
	w.claims = w.factory.Resource().V1().ResourceClaims().Informer()
	return w
}

// Run watches until ctx ends. It returns an error if the caches cannot sync.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.queue.ShutDown()
	if _, err := w.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.onPod(o, "add") },
		UpdateFunc: func(_, o any) { w.onPod(o, "update") },
		DeleteFunc: w.onPodDelete,
	}); err != nil {
		return fmt.Errorf("add pod handler: %w", err)
	}
	if _, err := w.claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.onClaim(o, "add") },
		UpdateFunc: func(_, o any) { w.onClaim(o, "update") },
		DeleteFunc: func(o any) { w.onClaim(o, "delete") },
	}); err != nil {
		return fmt.Errorf("add claim handler: %w", err)
	}
	w.factory.Start(ctx.Done())
	defer w.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), w.pods.HasSynced, w.claims.HasSynced) {
		return fmt.Errorf("wait for informer caches: %w", ctx.Err())
	}
	running, err := w.cfg.Signaler.RunningDevices(ctx)
	if err != nil {
		return fmt.Errorf("list running device workflows: %w", err)
	}
	w.store.seed(running)
	for _, id := range running {
		w.enqueue(id)
	}
	w.cfg.Logger.Info("watcher caches synced", "workers", w.cfg.Workers, "runningDevices", len(running))
	var wg sync.WaitGroup
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
	wg.Wait()
	return nil
}

// WaitForSync blocks until the informer caches have synced (or ctx ends).
func (w *Watcher) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), w.pods.HasSynced, w.claims.HasSynced)
}

func (w *Watcher) claimGetter(namespace, name string) (*resourcev1.ResourceClaim, bool) {
	obj, ok, err := w.claims.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	c, ok := obj.(*resourcev1.ResourceClaim)
	return c, ok
}

func (w *Watcher) onPod(obj any, action string) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		w.cfg.Metrics.ResolutionFailures.WithLabelValues("unexpected_object").Inc()
		return
	}
	w.cfg.Metrics.WatcherEvents.WithLabelValues("pod", action).Inc()
	w.handlePod(pod)
}

func (w *Watcher) handlePod(pod *corev1.Pod) {
	reports, errs := Resolve(pod, w.claimGetter)
	for _, r := range reports {
		w.cfg.Metrics.WatcherReports.WithLabelValues(string(r.Health)).Inc()
	}
	for _, e := range errs {
		w.cfg.Metrics.ResolutionFailures.WithLabelValues(e.Reason).Inc()
		if _, seen := w.logged.LoadOrStore(e.Key+"|"+e.Reason, struct{}{}); !seen {
			w.cfg.Logger.Warn("health report not resolved", "key", e.Key, "reason", e.Reason, "error", e.Err)
		}
	}
	for _, id := range w.store.setPod(podKey(pod), pod.ResourceVersion, reports, ClaimRefs(pod)) {
		w.enqueue(id)
	}
}

func (w *Watcher) onPodDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		w.cfg.Metrics.ResolutionFailures.WithLabelValues("unexpected_object").Inc()
		return
	}
	w.cfg.Metrics.WatcherEvents.WithLabelValues("pod", "delete").Inc()
	for _, id := range w.store.deletePod(podKey(pod), pod.ResourceVersion, ClaimRefs(pod)) {
		w.enqueue(id)
	}
}

// onClaim re-resolves the pods of a claim: a pod's report may arrive before its claim's allocation.
func (w *Watcher) onClaim(obj any, action string) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	claim, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		w.cfg.Metrics.ResolutionFailures.WithLabelValues("unexpected_object").Inc()
		return
	}
	w.cfg.Metrics.WatcherEvents.WithLabelValues("claim", action).Inc()
	for _, key := range w.store.podsOfClaim(claim.Namespace + "/" + claim.Name) {
		obj, exists, err := w.pods.GetIndexer().GetByKey(key)
		if err != nil || !exists {
			continue
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			w.handlePod(pod)
		}
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
	obs, d := w.store.next(id, w.cfg.Clock(), w.cfg.HeartbeatInterval)
	if d != doSignal {
		switch d {
		case skipDuplicate:
			w.cfg.Metrics.Deduplicated.Inc()
		case skipHealthy:
			w.cfg.Metrics.SkippedHealthy.Inc()
		}
		w.queue.Forget(id)
		return true
	}
	start := time.Now()
	err := w.cfg.Signaler.Signal(ctx, obs)
	w.cfg.Metrics.SignalSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		w.cfg.Metrics.Signals.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			w.cfg.Logger.Warn("signal device workflow failed; will retry", "device", id.String(), "error", err)
			w.queue.AddRateLimited(id)
		}
		return true
	}
	w.cfg.Metrics.Signals.WithLabelValues("ok").Inc()
	w.store.markSignalled(obs, w.cfg.Clock())
	w.queue.Forget(id)
	if len(obs.Reporters) > 0 {
		// Come back for the next heartbeat; an earlier change re-queues the device anyway.
		w.queue.AddAfter(id, w.cfg.HeartbeatInterval)
	}
	return true
}

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
