package watcher

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/healthreport"
)

// A detector's DeviceHealthReport is one more reporter of its device, under its own key: the
// device's health is the worst word of its Pods, its driver and every report, so one detector's
// Healthy clears only its own Unhealthy. A report is resolved to exactly one published device
// (by its DRA name, or an attribute on its node) when it arrives; one that names none, or two, is
// refused in its status and fences nothing.

// reportKey is the reporter key under which a DeviceHealthReport reports its device.
func reportKey(name string) string { return reportPrefix + name }

// reportName is the report a reporter key is of (false: the key is no report's).
func reportName(key string) (string, bool) { return strings.CutPrefix(key, reportPrefix) }

const reportPrefix = "report:"

// reportsRecheck is how often the watcher looks again for a DeviceHealthReport API it did not find.
const reportsRecheck = time.Minute

// reportIndex remembers the reports the watcher took in, so a relist finds those deleted meanwhile.
type reportIndex struct {
	mu sync.Mutex
	// names are the reports whose word stands, with the generation it is of.
	names map[string]int64
	seen  map[string]struct{}
}

// reportReader is the DeviceHealthReports' source: it takes each report in, resolved to its
// device as one more reporter, and writes what it made of it in the report's status.
type reportReader struct{ w *Watcher }

// forget drops a report whose word stands, and says the generation it was of.
func (x *reportIndex) forget(name string) (int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	gen, known := x.names[name]
	delete(x.names, name)
	return gen, known
}

// run reads DeviceHealthReports until ctx ends, once their API is served; until then it
// looks again every reportsRecheck (a cluster without the CRD, or a watcher not allowed to read
// reports, runs as before).
// synced is closed once the reports were listed, or found not to be served.
func (rr *reportReader) run(ctx context.Context, synced chan<- struct{}) {
	w := rr.w
	var once sync.Once
	done := func() { once.Do(func() { close(synced) }) }
	defer done()
	if w.cfg.Reports == nil {
		return
	}
	logged := false
	for ctx.Err() == nil {
		err := rr.served()
		if err == nil {
			w.cfg.Logger.Info("reading DeviceHealthReports")
			if w.cfg.ReportRetention > 0 {
				go rr.expireAll(ctx)
			}
			listed := make(chan struct{})
			go func() {
				select {
				case <-listed:
					done()
				case <-ctx.Done():
				}
			}()
			rr.source(ctx).run(ctx, listed)
			return
		}
		if !logged {
			w.cfg.Logger.Info("DeviceHealthReports are not read; looking again every minute", "why", err.Error())
			logged = true
		}
		done() // nothing to wait for: the other sources go on without reports
		sleep(ctx, cmp.Or(w.cfg.ReportsRecheck, reportsRecheck))
	}
}

// served says why DeviceHealthReports cannot be read (nil: they can).
func (rr *reportReader) served() error {
	w := rr.w
	list, err := w.cfg.Kube.Discovery().ServerResourcesForGroupVersion(healthreport.Group + "/" + healthreport.Version)
	if err != nil {
		return fmt.Errorf("the %s API is not served: %w", healthreport.Kind, err)
	}
	for _, r := range list.APIResources {
		if r.Name == healthreport.Resource {
			return nil
		}
	}
	return fmt.Errorf("the %s API is not served", healthreport.Kind)
}

func (rr *reportReader) source(ctx context.Context) *source {
	w := rr.w
	res := w.cfg.Reports
	return &source{
		name: "device health reports", logger: w.cfg.Logger,
		list:  pages(res.List),
		watch: res.Watch,
		relistBegin: func() {
			w.reports.mu.Lock()
			w.reports.seen = map[string]struct{}{}
			w.reports.mu.Unlock()
		},
		relistEnd: func() {
			w.reports.mu.Lock()
			var gone []string
			for name := range w.reports.names {
				if _, ok := w.reports.seen[name]; !ok {
					gone = append(gone, name)
				}
			}
			w.reports.seen = nil
			w.reports.mu.Unlock()
			for _, name := range gone {
				rr.drop(name)
			}
		},
		upsert: func(o runtime.Object, action string) {
			if u, ok := o.(*unstructured.Unstructured); ok {
				w.cfg.Metrics.WatcherEvents.WithLabelValues("report", action).Inc()
				rr.on(ctx, u)
			}
		},
		remove: func(o runtime.Object) {
			if u, ok := o.(*unstructured.Unstructured); ok {
				w.cfg.Metrics.WatcherEvents.WithLabelValues("report", "delete").Inc()
				rr.drop(u.GetName())
			}
		},
	}
}

// on takes a report in: resolved, it is its device's reporter; refused, it withdraws
// whatever it said before. Either way its status says so.
func (rr *reportReader) on(ctx context.Context, u *unstructured.Unstructured) {
	w := rr.w
	name := u.GetName()
	w.reports.mu.Lock()
	if w.reports.seen != nil {
		w.reports.seen[name] = struct{}{}
	}
	w.reports.mu.Unlock()
	r, err := healthreport.FromObject(u.Object)
	if err != nil {
		rr.refuse(ctx, u, r, err)
		return
	}
	if rr.expire(ctx, u) {
		return
	}
	if delivered(u, r) {
		return // its fault is its workflow's already (before a restart, or this status's own event)
	}
	id, node, err := w.resolveReport(ctx, r.Spec)
	if err != nil {
		rr.refuse(ctx, u, r, err)
		return
	}
	h, _ := r.Spec.HealthOf() // checked by resolveReport
	w.reports.mu.Lock()
	if w.reports.names == nil {
		w.reports.names = map[string]int64{}
	}
	w.reports.names[name] = u.GetGeneration()
	w.reports.mu.Unlock()
	once := ""
	if h == device.Unhealthy {
		// A fault is an event (once.go): its status says Delivered once its workflow has it.
		once = name + "@" + strconv.FormatInt(u.GetGeneration(), 10)
	}
	w.detectorWord(reportKey(name), u.GetResourceVersion(), id, node, h, r.Spec, once)
	if once != "" {
		return
	}
	unit := w.unitID(id)
	rr.writeStatus(ctx, u, r, healthreport.Status{Outcome: healthreport.Resolved, Device: id.String(), Workflow: unit.WorkflowID()})
}

// delivered says whether the report's fault is one its device's workflow already has: its
// status says Delivered for the generation it is at.
func delivered(u *unstructured.Unstructured, r healthreport.Report) bool {
	h, err := r.Spec.HealthOf()
	return err == nil && h == device.Unhealthy && r.Status.Outcome == healthreport.Delivered && r.Status.ObservedGeneration == u.GetGeneration()
}

// consume withdraws the one-time words the device's workflow acknowledged (once.go), and says
// in each report's status that its fault was delivered.
func (w *Watcher) consume(id device.ID) []string {
	keys := w.store.consume(id, w.cfg.Clock().Add(w.cfg.WithdrawAfter))
	for _, key := range keys {
		name, ok := reportName(key)
		if !ok {
			continue
		}
		if gen, known := w.reports.forget(name); known {
			w.markDelivered(name, gen, id)
		}
	}
	return keys
}

// markDelivered queues a report's Delivered status, at the generation whose fault was delivered.
func (w *Watcher) markDelivered(name string, gen int64, id device.ID) {
	w.statuses.put(name, healthreport.Status{Outcome: healthreport.Delivered, Device: id.String(), Workflow: id.WorkflowID(), ObservedGeneration: gen})
}

// refuse withdraws what a report said before and says in its status why it is refused.
func (rr *reportReader) refuse(ctx context.Context, u *unstructured.Unstructured, r healthreport.Report, why error) {
	w := rr.w
	w.cfg.Metrics.ResolutionFailures.WithLabelValues("health report refused").Inc()
	if w.logged.first(reportKey(u.GetName()), why.Error()) {
		w.cfg.Logger.Warn("device health report refused", "report", u.GetName(), "reason", why.Error())
	}
	rr.drop(u.GetName())
	rr.writeStatus(ctx, u, r, healthreport.Status{Outcome: healthreport.Refused, Reason: why.Error()})
}

// drop withdraws a report's word about its device (the report was deleted, or refused).
func (rr *reportReader) drop(name string) {
	w := rr.w
	if _, known := w.reports.forget(name); !known {
		return
	}
	w.podMu.Lock()
	ids, _ := w.store.setPod(reportKey(name), "", nil, nil, nil, false)
	w.podMu.Unlock()
	w.enqueueAll(ids)
}

// resolveReport finds the one published device a report names, and the device's node: by its
// DRA name from the slices the watcher knows, or (a device they do not show yet) from the
// ResourceSlices of its driver; by an attribute from those of its node.
func (w *Watcher) resolveReport(ctx context.Context, s healthreport.Spec) (device.ID, string, error) {
	if err := s.Check(); err != nil {
		return device.ID{}, "", err
	}
	if d := s.Device; d != nil {
		id := device.ID{Driver: d.Driver, Pool: d.Pool, Device: d.Name}
		if node, ok := w.slices.publishedOn(id); ok {
			return id, cmp.Or(node, s.Node), nil
		}
	}
	sel := "spec.nodeName=" + s.Node
	if s.Device != nil {
		sel = "spec.driver=" + s.Device.Driver
	}
	var published []resourcev1.ResourceSlice
	opts := metav1.ListOptions{FieldSelector: sel, Limit: listPageSize}
	for {
		l, err := w.cfg.Kube.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return device.ID{}, "", fmt.Errorf("cannot read the ResourceSlices (%s): %w", sel, err)
		}
		published = append(published, l.Items...)
		if opts.Continue = l.Continue; opts.Continue == "" {
			break
		}
	}
	id, err := healthreport.Resolve(s, published)
	if err != nil {
		return device.ID{}, "", err
	}
	for _, sl := range published {
		if sl.Spec.Driver == id.Driver && sl.Spec.Pool.Name == id.Pool && sl.Spec.NodeName != nil {
			return id, *sl.Spec.NodeName, nil
		}
	}
	return id, s.Node, nil
}

// writeStatus queues what the watcher made of a report, when that changed.
func (rr *reportReader) writeStatus(_ context.Context, u *unstructured.Unstructured, r healthreport.Report, st healthreport.Status) {
	w := rr.w
	st.ObservedGeneration = u.GetGeneration()
	if r.Status == st {
		return
	}
	w.statuses.put(u.GetName(), st)
}

// expired says whether a report is past the retention: observed (or, without an observed time,
// created) longer ago than ReportRetention.
func (rr *reportReader) expired(u *unstructured.Unstructured, r healthreport.Report) bool {
	w := rr.w
	if w.cfg.ReportRetention <= 0 {
		return false
	}
	at := u.GetCreationTimestamp().Time
	if r.Spec.ObservedTime != nil {
		at = r.Spec.ObservedTime.Time
	}
	return !at.IsZero() && w.cfg.Clock().Sub(at) > w.cfg.ReportRetention
}

// expireAll deletes reports past the retention, every tenth of it (at most every ten
// minutes): an expired report's word is withdrawn as a deleted one's is.
func (rr *reportReader) expireAll(ctx context.Context) {
	w := rr.w
	if w.cfg.ReportRetention <= 0 {
		return
	}
	every := min(w.cfg.ReportRetention/10, 10*time.Minute)
	for ctx.Err() == nil {
		opts := metav1.ListOptions{Limit: listPageSize}
		for {
			l, err := w.cfg.Reports.List(ctx, opts)
			if err != nil {
				w.cfg.Logger.Warn("list device health reports to expire them", "error", err)
				break
			}
			for i := range l.Items {
				rr.expire(ctx, &l.Items[i])
			}
			if opts.Continue = l.GetContinue(); opts.Continue == "" {
				break
			}
		}
		sleep(ctx, every)
	}
}

// expire deletes one report past the retention (the one read, by its UID and version); it says
// whether it did.
func (rr *reportReader) expire(ctx context.Context, u *unstructured.Unstructured) bool {
	w := rr.w
	r, err := healthreport.FromObject(u.Object)
	if err != nil || !rr.expired(u, r) {
		return false
	}
	// At the version read: one its detector renewed meanwhile stands.
	uid, rv := u.GetUID(), u.GetResourceVersion()
	pre := &metav1.Preconditions{UID: &uid}
	if rv != "" {
		pre.ResourceVersion = &rv
	}
	err = w.cfg.Reports.Delete(ctx, u.GetName(), metav1.DeleteOptions{Preconditions: pre})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.cfg.Logger.Warn("device health report past its retention not deleted", "report", u.GetName(), "error", err)
		return false
	}
	w.cfg.Metrics.WatcherEvents.WithLabelValues("report", "expire").Inc()
	rr.drop(u.GetName()) // its delete event comes too
	return true
}
