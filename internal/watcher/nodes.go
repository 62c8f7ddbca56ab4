package watcher

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// nodeOutages follows the node lifecycle controller's verdict: a node whose Ready condition is
// Unknown has stopped heartbeating (its kubelet's Lease was not renewed for the controller's grace
// period, judged by the controller's clock, so a node with a skewed clock is not down). That is
// one node-level decision, not a verdict on each of its devices, and cordoning or evicting the
// node is left to node failure handling.
//
// The watcher reads the verdict from the Nodes it watches instead of watching every node Lease:
// a kubelet renews its Lease every 10 s, so a fleet of 1,000 nodes sends 100 Lease events a
// second at rest, where its Nodes change every few minutes (BENCHMARKS.md).
type nodeOutages struct {
	mu   sync.Mutex
	down map[string]string // node -> the outage's message
	seen map[string]struct{}
}

func newNodeOutages() *nodeOutages {
	return &nodeOutages{down: map[string]string{}}
}

// outage says whether n is in an outage, and why.
func outage(n *corev1.Node) (string, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status != corev1.ConditionUnknown {
			return "", false
		}
		return fmt.Sprintf("node %s outage: Ready is Unknown since %s (%s: %s); node failure handling owns cordon and eviction",
			n.Name, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Reason, c.Message), true
	}
	return "", false
}

// put takes in a node; it returns the outage's message when the node went down, and up when it
// came back.
func (o *nodeOutages) put(n *corev1.Node) (down string, up bool) {
	msg, isDown := outage(n)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen != nil {
		o.seen[n.Name] = struct{}{}
	}
	_, was := o.down[n.Name]
	switch {
	case isDown && !was:
		o.down[n.Name] = msg
		return msg, false
	case !isDown && was:
		delete(o.down, n.Name)
		return "", true
	}
	return "", false
}

// remove forgets a deleted node; up says it was in an outage, which ends with it.
func (o *nodeOutages) remove(name string) (up bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, up = o.down[name]
	delete(o.down, name)
	return up
}

// relistBegin and relistEnd bracket a full list: a node in an outage that the list no longer
// has was deleted meanwhile.
func (o *nodeOutages) relistBegin() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = map[string]struct{}{}
}

func (o *nodeOutages) relistEnd() (gone []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		return nil // no list began
	}
	for node := range o.down {
		if _, ok := o.seen[node]; !ok {
			delete(o.down, node)
			gone = append(gone, node)
		}
	}
	o.seen = nil
	return gone
}

// outageSource watches the Nodes for their Ready condition.
func (w *Watcher) outageSource() *source {
	api := w.cfg.Kube.CoreV1().Nodes()
	return &source{
		name: "node outages", logger: w.cfg.Logger,
		list:        pages(api.List),
		watch:       api.Watch,
		relistBegin: w.outages.relistBegin,
		relistEnd: func() {
			for _, node := range w.outages.relistEnd() {
				w.nodeBack(node, "deleted")
			}
		},
		upsert: func(o runtime.Object, action string) {
			n, ok := o.(*corev1.Node)
			if !ok {
				return
			}
			w.cfg.Metrics.WatcherEvents.WithLabelValues("node", action).Inc()
			switch msg, up := w.outages.put(n); {
			case msg != "":
				w.cfg.Logger.Warn("node outage", "node", n.Name, "reason", msg)
				w.cfg.Metrics.NodeOutages.Inc()
				w.enqueueAll(w.store.setOutage(n.Name, msg))
			case up:
				w.nodeBack(n.Name, "ready")
			}
		},
		remove: func(o runtime.Object) {
			if n, ok := o.(*corev1.Node); ok {
				w.cfg.Metrics.WatcherEvents.WithLabelValues("node", "delete").Inc()
				if w.outages.remove(n.Name) {
					w.nodeBack(n.Name, "deleted")
				}
			}
		},
	}
}

// nodeBack ends a node's outage: it is Ready again, or gone.
func (w *Watcher) nodeBack(node, how string) {
	w.cfg.Logger.Info("node outage over", "node", node, "how", how)
	w.enqueueAll(w.store.setOutage(node, ""))
}

// measureReportAge measures how old the oldest delivered report is, every interval (a heartbeat
// that cannot reach Temporal makes reports go stale).
func (w *Watcher) measureReportAge(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.cfg.Metrics.ReportAge.Set(followed{w.store}.oldestSignal(w.cfg.Clock()).Seconds())
		}
	}
}
