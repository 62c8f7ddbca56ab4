package watcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// EventAmbiguous is the reason of the Events that record an ambiguous report.
const EventAmbiguous = "AmbiguousDeviceHealth"

// ambiguous handles a report that could be any of several devices of a claim. It is never
// dropped and never pinned on a guess: a non-Healthy one is recorded as a Warning Event on the Pod
// and on the claim, counted, logged and alerted; when the policy says quarantine-candidates every
// candidate is reported as the report says.
func (w *Watcher) ambiguous(pod *corev1.Pod, e ResolveError) []Report {
	if e.Health == device.Healthy {
		return nil // a Healthy report about one of them says nothing about any
	}
	first := e.Candidates[0]
	pol := w.cfg.Policies.For(e.Class(first.Request), first.Driver)
	w.cfg.Metrics.AmbiguousReports.WithLabelValues(pol.Ambiguous).Inc()
	names := make([]string, 0, len(e.Candidates))
	for _, c := range e.Candidates {
		names = append(names, c.Driver+"/"+c.Pool+"/"+c.Device)
	}
	text := fmt.Sprintf("%s report %s from container %s could be any of %d devices of claim %s (%s); policy %q: %s",
		e.Health, e.Key[strings.LastIndex(e.Key, "/")+1:], e.Reporter.Container, len(names), e.Claim, strings.Join(names, ", "), pol.Name, pol.Ambiguous)
	if e.Message != "" {
		text += "; driver message: " + e.Message
	}
	if w.logged.first(podKey(pod), "ambiguous|"+e.Key+"|"+string(e.Health)) {
		w.cfg.Logger.Error("ambiguous device health report", "key", e.Key, "health", e.Health, "candidates", names, "action", pol.Ambiguous,
			"fix", "declare how the driver names devices in CDI IDs: drivers.<driver>.cdi (device, claim-device, attribute:<name>) in the policy file")
		go w.recordAmbiguous(pod, e, text)
	}
	if pol.Ambiguous != policy.AmbiguousQuarantine {
		return nil
	}
	out := make([]Report, 0, len(e.Candidates))
	for _, c := range e.Candidates {
		out = append(out, Report{Device: device.ID{Driver: c.Driver, Pool: c.Pool, Device: c.Device}, DeviceClass: e.Class(c.Request),
			Node: e.Node, Health: e.Health, Message: "ambiguous report, one of " + fmt.Sprint(len(names)) + " devices: " + e.Message, Reporter: e.Reporter})
	}
	return out
}

// recordAmbiguous writes the Events and the alert; it runs apart from the pod handler.
func (w *Watcher) recordAmbiguous(pod *corev1.Pod, e ResolveError, text string) {
	ctx, cancel := context.WithTimeout(w.runContext(), 30*time.Second)
	defer cancel()
	claimNS, claimName, _ := strings.Cut(e.Claim, "/")
	refs := []corev1.ObjectReference{
		{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		{Kind: "ResourceClaim", APIVersion: "resource.k8s.io/v1", Namespace: claimNS, Name: claimName},
	}
	now := w.cfg.Clock().UnixNano()
	for i, ref := range refs {
		// Named as kubelet names its events: object name, then a unique hex suffix.
		name := fmt.Sprintf("%s.%x", ref.Name, now+int64(i))
		if err := kubeobj.CreateEvent(ctx, w.cfg.Kube, ref, EventAmbiguous, corev1.EventTypeWarning, text, name, "devicewarden.io/watcher"); err != nil {
			w.cfg.Logger.Warn("event not recorded", "object", ref.Kind+" "+ref.Namespace+"/"+ref.Name, "error", err)
		}
	}
	if w.cfg.Alerter != nil {
		if err := w.cfg.Alerter.Alert(ctx, notify.AlertInput{Level: devicemsg.LevelCritical, Text: text}); err != nil {
			w.cfg.Logger.Warn("ambiguous report not alerted", "error", err)
		}
	}
}

func (w *Watcher) runContext() context.Context {
	if w.ctx != nil {
		return w.ctx
	}
	return context.Background()
}
