package watcher

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// nodeLeases tracks node heartbeats (coordination.k8s.io Leases in kube-node-lease). A node whose
// Lease is not renewed in time is in outage: that is one node-level decision, not a verdict on each
// of its devices, and cordoning or evicting the node is left to node failure handling.
type nodeLeases struct {
	mu     sync.Mutex
	leases map[string]leaseInfo // node -> last renewal
	seen   map[string]struct{}
	down   map[string]bool
}

// leaseInfo judges a node by the watcher's own clock: renewed is the renewTime the node last
// wrote, seen when the watcher saw it change (as the node lifecycle controller does), so a node
// whose clock is off is not taken for down, and a node found already silent at start is given one
// full duration before it is.
type leaseInfo struct {
	renewed  time.Time
	seen     time.Time
	duration time.Duration
}

func newNodeLeases() *nodeLeases {
	return &nodeLeases{leases: map[string]leaseInfo{}, down: map[string]bool{}}
}

func (n *nodeLeases) put(l *coordinationv1.Lease, now time.Time) {
	info := leaseInfo{duration: 40 * time.Second, seen: now}
	if l.Spec.LeaseDurationSeconds != nil {
		info.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if l.Spec.RenewTime != nil {
		info.renewed = l.Spec.RenewTime.Time
	} else if l.Spec.AcquireTime != nil {
		info.renewed = l.Spec.AcquireTime.Time
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if old, ok := n.leases[l.Name]; ok && old.renewed.Equal(info.renewed) {
		info.seen = old.seen // not renewed: an unrelated write does not count as a heartbeat
	}
	n.leases[l.Name] = info
	if n.seen != nil {
		n.seen[l.Name] = struct{}{}
	}
}

func (n *nodeLeases) remove(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.leases, name)
}

// changes compares every Lease with now and returns nodes that went down (with a message) and
// nodes that came back.
func (n *nodeLeases) changes(now time.Time) (down map[string]string, up []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	down = map[string]string{}
	for node, l := range n.leases {
		expired := !l.renewed.IsZero() && now.Sub(l.seen) > l.duration
		switch {
		case expired && !n.down[node]:
			n.down[node] = true
			down[node] = fmt.Sprintf("node %s outage: its Lease was last seen renewed %s ago (duration %s); node failure handling owns cordon and eviction",
				node, now.Sub(l.seen).Round(time.Second), l.duration)
		case !expired && n.down[node]:
			delete(n.down, node)
			up = append(up, node)
		}
	}
	for node := range n.down {
		if _, ok := n.leases[node]; !ok { // the node (and its Lease) is gone
			delete(n.down, node)
			up = append(up, node)
		}
	}
	return down, up
}

func (w *Watcher) leaseSource() *source {
	api := w.cfg.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	return &source{
		name: "node leases", logger: w.cfg.Logger,
		list:  pages(api.List),
		watch: api.Watch,
		relistBegin: func() {
			w.leases.mu.Lock()
			w.leases.seen = map[string]struct{}{}
			w.leases.mu.Unlock()
		},
		relistEnd: func() {
			w.leases.mu.Lock()
			for node := range w.leases.leases {
				if _, ok := w.leases.seen[node]; !ok {
					delete(w.leases.leases, node)
				}
			}
			w.leases.seen = nil
			w.leases.mu.Unlock()
		},
		upsert: func(o runtime.Object, action string) {
			if l, ok := o.(*coordinationv1.Lease); ok {
				w.cfg.Metrics.WatcherEvents.WithLabelValues("lease", action).Inc()
				w.leases.put(l, w.cfg.Clock())
			}
		},
		remove: func(o runtime.Object) {
			if l, ok := o.(*coordinationv1.Lease); ok {
				w.cfg.Metrics.WatcherEvents.WithLabelValues("lease", "delete").Inc()
				w.leases.remove(l.Name)
			}
		},
	}
}

// checkLeases runs the node-level decisions every interval, and measures how old the oldest
// delivered report is (a heartbeat that cannot reach Temporal makes reports go stale).
func (w *Watcher) checkLeases(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.cfg.Metrics.ReportAge.Set(followed{w.store}.oldestSignal(w.cfg.Clock()).Seconds())
			down, up := w.leases.changes(w.cfg.Clock())
			for node, msg := range down {
				w.cfg.Logger.Warn("node outage", "node", node, "reason", msg)
				w.cfg.Metrics.NodeOutages.Inc()
				w.enqueueAll(w.store.setOutage(node, msg))
			}
			for _, node := range up {
				w.cfg.Logger.Info("node lease renewed again", "node", node)
				w.enqueueAll(w.store.setOutage(node, ""))
			}
		}
	}
}
