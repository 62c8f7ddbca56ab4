package watcher

import (
	"context"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Node Problem Detector, and the GPU plugins of AKS and GKE, say a GPU failed in a node condition
// (XIDErrors, GPUMissing, XidCriticalError), naming the GPU only in its message, if at all. A
// condition the policy lists (policy.Signals.NodeConditions) that turns True is an event: one
// whose message names GPUs (by UUID, or "GPU <index>") is each GPU's fault, sent once as a
// detector's; one that names none is the node's, for its node workflow (a record and an alert),
// and fences nothing. A condition that stood longer than conditionLookback before the watcher
// started is no news (it was acted on, or it is old).

// NodeSignaler tells a node's workflow about its node (api.NodeClient).
type NodeSignaler interface {
	DeviceFailed(ctx context.Context, f escalation.NodeFailure) error
}

// conditionLookback is how long before the watcher started a condition may have turned True and
// still be acted on.
const conditionLookback = 10 * time.Minute

const conditionSource = "node-condition"

var (
	gpuUUID  = regexp.MustCompile(`(?i)\bGPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	gpuIndex = regexp.MustCompile(`(?i)\bGPU[ _#-]?(?:index[ =:]?)?([0-9]{1,3})\b`)
)

// conditionIndex remembers, per node and condition type, the word last taken (its transition
// time and message), so a Node's other updates cost nothing.
type conditionIndex struct {
	mu    sync.Mutex
	words map[string]string
	// sent remembers, per node, condition type and GPU named ("" for the node), the transition
	// whose fault was sent: a message rewritten while the condition stands True (a count, a
	// time) is no new fault; a GPU it names for the first time is.
	sent  map[string]time.Time
	since time.Time
}

// sentAt says whether what key names was sent for the condition's transition at.
func (x *conditionIndex) sentAt(key string, at time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	prev, ok := x.sent[key]
	return ok && prev.Equal(at)
}

// markSent notes what key names sent for the transition at.
func (x *conditionIndex) markSent(key string, at time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sent == nil {
		x.sent = map[string]time.Time{}
	}
	x.sent[key] = at
}

// forgetNode drops what was taken of a deleted node's conditions.
func (x *conditionIndex) forgetNode(node string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	mine := func(k string) bool { return strings.HasPrefix(k, node+"/") }
	maps.DeleteFunc(x.words, func(k, _ string) bool { return mine(k) })
	maps.DeleteFunc(x.sent, func(k string, _ time.Time) bool { return mine(k) })
}

// NamedGPUs are the GPUs a condition message names: attribute name and value, by UUID when it
// gives any, else by index.
func NamedGPUs(msg string, sig policy.Signals) []healthreport.Attribute {
	var out []healthreport.Attribute
	seen := map[string]bool{}
	for _, u := range gpuUUID.FindAllString(msg, -1) {
		if !seen[strings.ToUpper(u)] {
			seen[strings.ToUpper(u)] = true
			out = append(out, healthreport.Attribute{Name: sig.UUIDAttribute, Value: u})
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, m := range gpuIndex.FindAllStringSubmatch(msg, -1) {
		i, _ := strconv.Atoi(m[1]) // "GPU 03" is index 3
		if v := strconv.Itoa(i); !seen[v] {
			seen[v] = true
			out = append(out, healthreport.Attribute{Name: sig.IndexAttribute, Value: v})
		}
	}
	return out
}

// conditionReader is the node conditions' source: it watches the nodes and sends each GPU's
// fault once, on the watcher's devices and queue.
type conditionReader struct {
	w     *Watcher
	index conditionIndex
}

func (r *conditionReader) source(ctx context.Context) *source {
	nodes := r.w.cfg.Kube.CoreV1().Nodes()
	return &source{
		name: "node conditions", logger: r.w.cfg.Logger,
		list:  pages(nodes.List),
		watch: nodes.Watch,
		// A relist takes every node in again: words already taken are no news, and a node deleted
		// meanwhile keeps a few bytes until a node of its name comes back.
		relistBegin: func() {},
		relistEnd:   func() {},
		upsert: func(o runtime.Object, action string) {
			if n, ok := o.(*corev1.Node); ok {
				r.onNode(ctx, n)
			}
		},
		remove: func(o runtime.Object) {
			if n, ok := o.(*corev1.Node); ok {
				r.index.forgetNode(n.Name)
			}
		},
	}
}

// run watches the nodes' conditions the policy lists, until ctx ends.
func (r *conditionReader) run(ctx context.Context) {
	if len(r.w.cfg.Policies.Signals().NodeConditions) == 0 {
		return
	}
	r.index.mu.Lock()
	r.index.words, r.index.since = map[string]string{}, r.w.cfg.Clock()
	r.index.mu.Unlock()
	r.source(ctx).run(ctx, make(chan struct{}))
}

// onNode takes in what changed in one node's listed conditions.
func (r *conditionReader) onNode(ctx context.Context, n *corev1.Node) {
	w := r.w
	sig := w.cfg.Policies.Signals()
	for _, want := range sig.NodeConditions {
		var cond *corev1.NodeCondition
		for i := range n.Status.Conditions {
			if string(n.Status.Conditions[i].Type) == want.Type {
				cond = &n.Status.Conditions[i]
			}
		}
		key := n.Name + "/" + want.Type
		r.index.mu.Lock()
		if cond == nil || cond.Status != corev1.ConditionTrue {
			delete(r.index.words, key) // gone or False: its next True is news
			r.index.mu.Unlock()
			continue
		}
		word := cond.LastTransitionTime.UTC().Format(time.RFC3339) + "|" + cond.Reason + "|" + cond.Message
		news := r.index.words[key] != word
		r.index.words[key] = word
		old := cond.LastTransitionTime.Time.Before(r.index.since.Add(-conditionLookback))
		r.index.mu.Unlock()
		if !news {
			continue
		}
		w.cfg.Metrics.WatcherEvents.WithLabelValues("node-condition", "true").Inc()
		if old {
			if w.logged.first(key, word) {
				w.cfg.Logger.Info("a node condition stood before the watcher started; not acted on", "node", n.Name, "condition", want.Type, "since", cond.LastTransitionTime.Time)
			}
			continue
		}
		r.onTrue(ctx, n.Name, want.Type, *cond, word, sig)
	}
}

// onTrue sends a True condition to the GPUs its message names, or to the node's workflow.
func (r *conditionReader) onTrue(ctx context.Context, node, kind string, c corev1.NodeCondition, word string, sig policy.Signals) {
	w := r.w
	msg := strings.TrimSpace(c.Reason + ": " + c.Message)
	named := NamedGPUs(c.Message, sig)
	at := c.LastTransitionTime.Time
	if len(named) == 0 {
		if r.index.sentAt(node+"/"+kind+"/", at) {
			return
		}
		r.index.markSent(node+"/"+kind+"/", at)
		w.cfg.Metrics.SignalRefused.WithLabelValues(conditionSource, "names no device").Inc()
		if w.cfg.Nodes == nil {
			w.cfg.Logger.Warn("a node condition names no GPU; no device is fenced for it", "node", node, "condition", kind, "message", msg)
			return
		}
		f := escalation.NodeFailure{Node: node, Condition: kind, Message: msg}
		if err := w.cfg.Nodes.DeviceFailed(ctx, f); err != nil {
			w.cfg.Logger.Warn("a node condition naming no GPU did not reach the node's workflow", "node", node, "condition", kind, "error", err)
		}
		return
	}
	for _, a := range named {
		if r.index.sentAt(node+"/"+kind+"/"+a.Value, at) {
			continue // the same transition: this GPU's fault was sent
		}
		spec := healthreport.Spec{Node: node, Attribute: &a, Health: string(device.Unhealthy), Source: "npd",
			Cause: healthreport.Cause{Code: kind}, Message: c.Message}
		id, on, err := w.resolveReport(ctx, spec)
		if err != nil {
			w.cfg.Metrics.SignalRefused.WithLabelValues(conditionSource, "no such device").Inc()
			if w.logged.first(node+"/"+kind, err.Error()) {
				w.cfg.Logger.Warn("a node condition names a GPU that is not tied to a device", "node", node, "condition", kind, "reason", err.Error())
			}
			continue
		}
		w.cfg.Metrics.SignalFaults.WithLabelValues(conditionSource, kind).Inc()
		key := "condition:" + node + "/" + kind + "/" + id.String()
		// The word is the transition's, not its message's: a new leader sends the word its
		// predecessor delivered, whatever the detector rewrote since, and the workflow knows it.
		w.detectorWord(key, "", id, on, device.Unhealthy, spec, key+"@"+at.UTC().Format(time.RFC3339Nano))
		r.index.markSent(node+"/"+kind+"/"+a.Value, at)
	}
}
