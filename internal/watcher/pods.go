package watcher

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// podReader turns Pods' allocatedResourcesStatus and claims' device conditions into the store's
// reports: it keeps the claims' index, resolves each Pod's health entries to devices, and
// re-resolves a Pod when a claim it uses changes.
type podReader struct{ w *Watcher }

func (pr podReader) claimSource() *source {
	w := pr.w
	api := w.cfg.Kube.ResourceV1().ResourceClaims(metav1.NamespaceAll)
	return &source{
		name: "resourceclaims", logger: w.cfg.Logger,
		list:        pages(api.List),
		watch:       api.Watch,
		relistBegin: w.claims.relistBegin,
		relistEnd: func() {
			for _, key := range w.claims.relistEnd() {
				pr.reresolve(key)
			}
		},
		upsert: func(o runtime.Object, action string) { pr.onClaim(o, action) },
		remove: func(o runtime.Object) { pr.onClaim(o, "delete") },
	}
}

func (pr podReader) podSource() *source {
	w := pr.w
	api := w.cfg.Kube.CoreV1().Pods(metav1.NamespaceAll)
	// Only bound pods can carry health reports.
	bound := fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	return &source{
		name: "pods", logger: w.cfg.Logger,
		list: pages(func(ctx context.Context, o metav1.ListOptions) (*corev1.PodList, error) {
			o.FieldSelector = bound
			return api.List(ctx, o)
		}),
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = bound
			return api.Watch(ctx, o)
		},
		relistBegin: w.store.relistBegin,
		relistEnd: func() {
			for _, key := range w.store.relistEnd() {
				w.podMu.Lock()
				ids := w.store.deletePod(key, "")
				w.podMu.Unlock()
				w.logged.forget(key)
				w.enqueueAll(ids)
			}
		},
		upsert: func(o runtime.Object, action string) { pr.onPod(o, action) },
		remove: pr.onPodDelete,
	}
}

func (pr podReader) onPod(obj runtime.Object, action string) {
	w := pr.w
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		w.cfg.Metrics.ResolutionFailures.WithLabelValues("unexpected_object").Inc()
		return
	}
	w.cfg.Metrics.WatcherEvents.WithLabelValues("pod", action).Inc()
	w.store.markSeen(podKey(pod))
	if !pr.relevant(pod) {
		return
	}
	w.podMu.Lock()
	ids := pr.handlePod(pod)
	w.podMu.Unlock()
	w.enqueueAll(ids)
}

// relevant says whether a pod needs a look: it reports something other than Healthy, it is
// already tracked, or one of its claims holds a device the watcher follows.
func (pr podReader) relevant(pod *corev1.Pod) bool {
	w := pr.w
	for _, cs := range pod.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, rh := range rs.Resources {
				if rh.Health != corev1.ResourceHealthStatusHealthy {
					return true
				}
			}
		}
	}
	if w.store.tracked(podKey(pod)) {
		return true
	}
	for _, ref := range ClaimRefs(pod) {
		ns, name, _ := strings.Cut(ref, "/")
		if c, ok := w.claims.get(ns, name); ok && (followed{w.store}).followsAny(c.Results()) {
			return true
		}
	}
	return false
}

// handlePod resolves a pod and returns the devices whose reports changed. Callers hold podMu.
func (pr podReader) handlePod(pod *corev1.Pod) []device.ID {
	w := pr.w
	reports, errs := Resolve(pod, w.claims.get, naming{w})
	reports = append(reports, w.silentHolders(pod, reports)...)
	unresolved := false
	for _, e := range errs {
		if e.Reason == ReasonAmbiguous {
			reports = append(reports, w.ambiguous(pod, e)...)
			continue
		}
		unresolved = true
		w.cfg.Metrics.ResolutionFailures.WithLabelValues(e.Reason).Inc()
		if w.logged.first(podKey(pod), e.Key+"|"+e.Reason) {
			w.cfg.Logger.Warn("health report not resolved", "key", e.Key, "reason", e.Reason, "error", e.Err)
		}
	}
	for _, r := range reports {
		w.cfg.Metrics.WatcherReports.WithLabelValues(string(r.Health)).Inc()
	}
	// Keep the pod while it reports anything, or while a claim it uses is unresolved: a later
	// claim change re-resolves it.
	var keep *corev1.Pod
	if len(reports) > 0 || len(errs) > 0 {
		keep = stripPod(pod)
	}
	ids, passed := w.store.setPod(podKey(pod), pod.ResourceVersion, reports, ClaimRefs(pod), keep, unresolved)
	w.cfg.Metrics.SkippedHealthy.Add(float64(passed))
	return ids
}

func (pr podReader) onPodDelete(obj runtime.Object) {
	w := pr.w
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		w.cfg.Metrics.ResolutionFailures.WithLabelValues("unexpected_object").Inc()
		return
	}
	w.cfg.Metrics.WatcherEvents.WithLabelValues("pod", "delete").Inc()
	w.podMu.Lock()
	ids := w.store.deletePod(podKey(pod), pod.ResourceVersion)
	w.podMu.Unlock()
	w.logged.forget(podKey(pod))
	w.enqueueAll(ids)
}

// onClaim records the claim and re-resolves the tracked pods that use it: a pod's report may
// arrive before its claim's allocation.
func (pr podReader) onClaim(obj runtime.Object, action string) {
	w := pr.w
	claim, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		w.cfg.Metrics.ResolutionFailures.WithLabelValues("unexpected_object").Inc()
		return
	}
	w.cfg.Metrics.WatcherEvents.WithLabelValues("claim", action).Inc()
	var key string
	var compact *Claim
	if action == "delete" {
		key = w.claims.delete(claim)
	} else {
		key, compact = w.claims.put(claim)
	}
	pr.reresolve(key)
	pr.claimConditions(key, claim.ResourceVersion, compact)
	// A device that vanished from its slice while this claim held it: once the claim lets it go
	// (deleted, or reallocated after its Pods left a dead node), nothing is left to report.
	sliceReader{w}.withdrawUnpublished(w.slices.released(key, compact))
}

// claimConditions reports the devices a driver marked in the claim's status.devices[] conditions,
// under a reporter of its own, and withdraws the report when the condition clears.
func (pr podReader) claimConditions(key, version string, c *Claim) {
	w := pr.w
	var reports []Report
	if c != nil {
		for _, d := range c.Troubled {
			reports = append(reports, Report{Device: d.Device, Health: d.Health, Message: d.Message, Source: devicemsg.SourceClaimCondition,
				Reporter: api.Reporter{Claim: key, Health: d.Health}})
		}
	}
	w.podMu.Lock()
	if len(reports) == 0 && !(followed{w.store}).hasReporter(claimConditionKey(key)) {
		w.podMu.Unlock()
		return
	}
	ids, _ := w.store.setPod(claimConditionKey(key), version, reports, nil, nil, false)
	for _, id := range ids {
		if !slices.ContainsFunc(reports, func(r Report) bool { return r.Device == id }) {
			w.store.clearedByDriver(id, devicemsg.SourceClaimCondition) // the driver's condition cleared
		}
	}
	w.podMu.Unlock()
	w.enqueueAll(ids)
	if len(reports) > 0 && len(ids) > 0 {
		go w.adoptHolders(key)
	}
}

func claimConditionKey(claim string) string { return "claimcondition:" + claim }

func (pr podReader) reresolve(claimKey string) {
	w := pr.w
	w.podMu.Lock()
	var ids []device.ID
	for _, pod := range (followed{w.store}).podsOfClaim(claimKey) {
		ids = append(ids, pr.handlePod(pod)...)
	}
	w.podMu.Unlock()
	w.enqueueAll(ids)
}
