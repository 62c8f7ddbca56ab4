package watcher

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// poolKey names a driver's pool.
type poolKey struct{ driver, pool string }

// sliceIndex remembers which devices each pool publishes, across all of the pool's slices, so a
// device that disappears while allocated can be reported Unknown: its driver no longer vouches for it.
type sliceIndex struct {
	mu     sync.Mutex
	slices map[string]sliceInfo // slice name -> what it published
	pools  map[poolKey]map[string]int
	intern interner
	seen   map[string]struct{}
	// missing are the allocated devices reported gone, with the claim that held them: a device
	// back under any slice name, or no longer held by that claim, withdraws the report.
	missing map[device.ID]string
	// attrs holds, for drivers whose CDI device IDs name devices by an attribute, each published
	// device's values of those attributes (nothing for other drivers).
	attrs map[device.ID]map[string]string
	// taints holds, per slice, the taints its driver put on its devices (only tainted devices).
	taints map[string]sliceTaints
	// poolSlices names each pool's slices; units caches each pool's physical units (units.go).
	poolSlices map[poolKey]map[string]struct{}
	units      map[poolKey]*poolUnits
	// grouping counts the slices whose devices may share a unit (they draw on counters or carry
	// the grouping attribute): while it is zero, no report needs a unit looked up.
	grouping atomic.Int64
}

// sliceTaints are one slice's driver taints: device -> what the taint says.
type sliceTaints struct {
	pool    poolKey
	devices map[string]string
}

type sliceInfo struct {
	pool    poolKey
	node    string
	devices []string
	// attrs: device -> attribute -> value, only the attributes a CDI style reads.
	attrs map[string]map[string]string
	// taints: device -> the driver's taint on it (only tainted devices).
	taints map[string]string
	// units: what groups the slice's devices into physical units (units.go).
	units unitInfo
}

func newSliceIndex() *sliceIndex {
	return &sliceIndex{slices: map[string]sliceInfo{}, pools: map[poolKey]map[string]int{}, missing: map[device.ID]string{},
		attrs: map[device.ID]map[string]string{}, taints: map[string]sliceTaints{},
		poolSlices: map[poolKey]map[string]struct{}{}, units: map[poolKey]*poolUnits{}}
}

// taintChanges records a slice's driver taints (info nil: the slice is gone) and returns the
// devices newly tainted or tainted differently, and those whose taint was taken off.
func (x *sliceIndex) taintChanges(name string, info *sliceInfo) (tainted map[device.ID]string, cleared []device.ID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.taints[name]
	var now sliceTaints
	if info != nil {
		now = sliceTaints{pool: info.pool, devices: info.taints}
	}
	for d, msg := range now.devices {
		if old.devices[d] != msg {
			if tainted == nil {
				tainted = map[device.ID]string{}
			}
			tainted[device.ID{Driver: now.pool.driver, Pool: now.pool.pool, Device: d}] = msg
		}
	}
	for d := range old.devices {
		if _, still := now.devices[d]; !still {
			cleared = append(cleared, device.ID{Driver: old.pool.driver, Pool: old.pool.pool, Device: d})
		}
	}
	if len(now.devices) == 0 {
		delete(x.taints, name)
	} else {
		x.taints[name] = now
	}
	return tainted, cleared
}

// attribute is the value a published device has for a CDI style's attribute.
func (x *sliceIndex) attribute(id device.ID, name string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	v, ok := x.attrs[id][name]
	return v, ok
}

// set records a slice (nil devices: deleted) and returns the devices of its pool that disappeared
// and those that came back.
func (x *sliceIndex) set(name string, info *sliceInfo) (gone, back []device.ID, node string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old, had := x.slices[name]
	var pk poolKey
	if info != nil {
		pk, node = info.pool, info.node
	} else if had {
		pk, node = old.pool, old.node
	} else {
		return nil, nil, ""
	}
	delete(x.units, pk)
	if had && old.units.grouped() {
		x.grouping.Add(-1)
	}
	if info != nil && info.units.grouped() {
		x.grouping.Add(1)
	}
	if had && old.pool != pk {
		delete(x.units, old.pool)
		delete(x.poolSlices[old.pool], name)
	}
	if info != nil {
		if x.poolSlices[pk] == nil {
			x.poolSlices[pk] = map[string]struct{}{}
		}
		x.poolSlices[pk][name] = struct{}{}
	} else if delete(x.poolSlices[pk], name); len(x.poolSlices[pk]) == 0 {
		delete(x.poolSlices, pk)
	}
	counts := x.pools[pk]
	if counts == nil {
		counts = map[string]int{}
		x.pools[pk] = counts
	}
	if had {
		for _, d := range old.devices {
			if counts[d]--; counts[d] == 0 {
				delete(counts, d)
				gone = append(gone, device.ID{Driver: pk.driver, Pool: pk.pool, Device: d})
			}
		}
	}
	if info != nil {
		for _, d := range info.devices {
			if counts[d] == 0 {
				// Published again, under this slice name or another (drivers re-create slices with
				// generated names): a report that it was gone is withdrawn.
				id := device.ID{Driver: pk.driver, Pool: pk.pool, Device: d}
				if _, wasMissing := x.missing[id]; wasMissing {
					back = append(back, id)
					delete(x.missing, id)
				}
			}
			counts[d]++
			if a := info.attrs[d]; a != nil {
				x.attrs[device.ID{Driver: pk.driver, Pool: pk.pool, Device: d}] = a
			}
		}
		x.slices[name] = *info
		if x.seen != nil {
			x.seen[name] = struct{}{}
		}
	} else {
		delete(x.slices, name)
	}
	// A device removed from one slice and present in another (or re-added) is not gone.
	gone = slices.DeleteFunc(gone, func(id device.ID) bool { return counts[id.Device] > 0 })
	for _, id := range gone {
		delete(x.attrs, id)
	}
	if len(counts) == 0 {
		delete(x.pools, pk)
	}
	return gone, back, node
}

// sliceReader is the ResourceSlices' source: the published devices, a device gone from its
// slice while allocated (Unknown), and a driver's taint in its slice, on the watcher's devices
// and queue.
type sliceReader struct{ w *Watcher }

func (sr sliceReader) source() *source {
	w := sr.w
	api := w.cfg.Kube.ResourceV1().ResourceSlices()
	upsert := func(o runtime.Object, action string) {
		s, ok := o.(*resourcev1.ResourceSlice)
		if !ok {
			return
		}
		w.cfg.Metrics.WatcherEvents.WithLabelValues("slice", action).Inc()
		info := sliceInfoOf(s, w.cfg.Policies, &w.slices.intern)
		sr.changed(s.Name, info)
	}
	return &source{
		name: "resourceslices", logger: w.cfg.Logger,
		list:  pages(api.List),
		watch: api.Watch,
		relistBegin: func() {
			w.slices.mu.Lock()
			w.slices.seen = map[string]struct{}{}
			w.slices.mu.Unlock()
		},
		relistEnd: func() {
			w.slices.mu.Lock()
			var gone []string
			for name := range w.slices.slices {
				if _, ok := w.slices.seen[name]; !ok {
					gone = append(gone, name)
				}
			}
			w.slices.seen = nil
			w.slices.mu.Unlock()
			for _, name := range gone {
				sr.changed(name, nil)
			}
		},
		upsert: upsert,
		remove: func(o runtime.Object) {
			if s, ok := o.(*resourcev1.ResourceSlice); ok {
				w.cfg.Metrics.WatcherEvents.WithLabelValues("slice", "delete").Inc()
				sr.changed(s.Name, nil)
			}
		},
	}
}

// sliceInfoOf is what the watcher keeps of a slice: its pool and node, its devices, their driver
// taints, the attributes the driver's CDI styles read, and what groups them into units.
func sliceInfoOf(s *resourcev1.ResourceSlice, pols *policy.Set, intern *interner) *sliceInfo {
	info := &sliceInfo{pool: poolKey{intern.get(s.Spec.Driver), intern.get(s.Spec.Pool.Name)}}
	if s.Spec.NodeName != nil {
		info.node = *s.Spec.NodeName
	}
	info.units.addCounters(s.Spec.SharedCounters)
	names := pols.CDIAttributes(s.Spec.Driver)
	grouping := pols.Units(s.Spec.Driver)
	for _, d := range s.Spec.Devices {
		info.devices = append(info.devices, intern.get(d.Name))
		if msg := driverTaint(d.Taints); msg != "" {
			if info.taints == nil {
				info.taints = map[string]string{}
			}
			info.taints[d.Name] = msg
		}
		if a := attributeValues(s.Spec.Driver, d, names); a != nil {
			if info.attrs == nil {
				info.attrs = map[string]map[string]string{}
			}
			info.attrs[d.Name] = a
		}
		info.units.add(s.Spec.Driver, d, grouping)
	}
	return info
}

// driverTaint describes the taints a driver put on a device in its own slice ("" when none acts:
// effect None only informs). Drivers taint devices they find broken; DeviceWarden's own taints
// live in DeviceTaintRules and never appear here.
func driverTaint(taints []resourcev1.DeviceTaint) string {
	var parts []string
	for _, t := range taints {
		if t.Effect != resourcev1.DeviceTaintEffectNoSchedule && t.Effect != resourcev1.DeviceTaintEffectNoExecute {
			continue
		}
		p := t.Key
		if t.Value != "" {
			p += "=" + t.Value
		}
		parts = append(parts, p+":"+string(t.Effect))
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return "driver tainted the device in its ResourceSlice: " + strings.Join(parts, ", ")
}

// attributeValues reads the named attributes of a device. A name without a domain is also looked
// up in the driver's domain, as DRA qualifies such names.
func attributeValues(driver string, d resourcev1.Device, names []string) map[string]string {
	var out map[string]string
	for _, name := range names {
		a, ok := d.Attributes[resourcev1.QualifiedName(name)]
		if !ok && !strings.Contains(name, "/") {
			a, ok = d.Attributes[resourcev1.QualifiedName(driver+"/"+name)]
		}
		var v string
		switch {
		case !ok:
			continue
		case a.StringValue != nil:
			v = *a.StringValue
		case a.IntValue != nil:
			v = strconv.FormatInt(*a.IntValue, 10)
		case a.VersionValue != nil:
			v = *a.VersionValue
		default:
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = v
	}
	return out
}

// changed reports devices that vanished while allocated as Unknown, and withdraws that
// report when they are published again.
func (sr sliceReader) changed(name string, info *sliceInfo) {
	w := sr.w
	pk, ok := w.slices.poolOf(name, info)
	groupedBefore := w.slices.grouping.Load() > 0
	gone, back, node := w.slices.set(name, info)
	tainted, cleared := w.slices.taintChanges(name, info)
	for id, msg := range tainted {
		sr.reportTaint(id, name, node, msg)
	}
	for _, id := range cleared {
		sr.withdrawTaint(id)
	}
	for _, id := range gone {
		claim := w.claims.holding(id)
		if claim == "" {
			continue // not allocated: nothing runs on it, nothing to say
		}
		sr.reportMissing(id, claim, node)
	}
	sr.withdrawUnpublished(back)
	if ok && (groupedBefore || w.slices.grouping.Load() > 0) {
		// The pool's units may have changed: their workflows hear of new forms to fence. Where no
		// slice groups devices (before or after this one), no unit can have changed: a cluster
		// without partitionable drivers scans nothing per slice event.
		w.enqueueAll(followed{w.store}.unitsIn(pk.driver, pk.pool))
	}
}

// poolOf is the pool of a slice: the one it is recorded with now (info nil), or info's.
func (x *sliceIndex) poolOf(name string, info *sliceInfo) (poolKey, bool) {
	if info != nil {
		return info.pool, true
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	old, ok := x.slices[name]
	return old.pool, ok
}

// reportMissing reports an allocated device that its driver no longer publishes as Unknown.
func (sr sliceReader) reportMissing(id device.ID, claim, node string) {
	w := sr.w
	w.slices.markMissing(id, claim)
	w.podMu.Lock()
	ids, _ := w.store.setPod(unpublishedKey(id), "", []Report{{Device: id, Node: node, Health: device.Unknown,
		Message:  "device disappeared from its ResourceSlice while allocated to claim " + claim,
		Reporter: api.Reporter{Claim: claim, Health: device.Unknown}}}, nil, nil, false)

	w.podMu.Unlock()
	w.enqueueAll(ids)
	go w.adoptHolders(claim)
}

// publishedOn says whether the device's pool publishes it now, and names the node of the pool's
// slices ("" for a pool of no node): a report that names a device by its DRA name is resolved
// from the watch, not from a list of every slice of its driver.
func (x *sliceIndex) publishedOn(id device.ID) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	pk := poolKey{id.Driver, id.Pool}
	if x.pools[pk][id.Device] == 0 {
		return "", false
	}
	for name := range x.poolSlices[pk] {
		if n := x.slices[name].node; n != "" {
			return n, true
		}
	}
	return "", true
}

// unpublished reports whether the device's pool is published now without the device. A pool with
// no slice at all says nothing at start (its node may be gone; its claims let go of it with its Pods).
func (x *sliceIndex) unpublished(id device.ID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	devs, ok := x.pools[poolKey{id.Driver, id.Pool}]
	return ok && devs[id.Device] == 0
}

// scanMissing reports every allocated device that its pool no longer publishes, from the state
// listed at start: a device that vanished while no watcher was looking is as missing as one seen going.
func (sr sliceReader) scanMissing() {
	w := sr.w
	type held struct {
		id    device.ID
		claim string
	}
	var missing []held
	w.claims.mu.RLock()
	for key, c := range w.claims.claims {
		for r := range c.Results() {
			id := device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
			if w.slices.unpublished(id) {
				missing = append(missing, held{id, key})
			}
		}
	}
	w.claims.mu.RUnlock()
	for _, m := range missing {
		sr.reportMissing(m.id, m.claim, "")
	}
}

// markMissing remembers that an allocated device was reported gone while claim held it.
func (x *sliceIndex) markMissing(id device.ID, claim string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.missing[id] = claim
}

// released returns (and forgets) the missing devices that claim held and holds no more (c nil:
// the claim is gone): nothing runs on them now, so there is nothing to report Unknown.
func (x *sliceIndex) released(claim string, c *Claim) []device.ID {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []device.ID
	for id, holder := range x.missing {
		if holder != claim {
			continue
		}
		if c != nil && c.holds(id) {
			continue
		}
		out = append(out, id)
		delete(x.missing, id)
	}
	return out
}

// withdrawUnpublished takes back the watcher's own "gone from its slice" reports of ids.
func (sr sliceReader) withdrawUnpublished(ids []device.ID) {
	w := sr.w
	for _, id := range ids {
		w.podMu.Lock()
		changed, _ := w.store.setPod(unpublishedKey(id), "", nil, nil, nil, false)
		w.podMu.Unlock()
		w.enqueueAll(changed)
	}
}

// unpublishedKey is the reporter key under which the watcher itself reports a vanished device.
func unpublishedKey(id device.ID) string { return "resourceslice:" + id.String() }

// adoptHolders reads the pods a claim is reserved for and looks at them now: the device gained an
// entry without them, and their Healthy reports were not kept. A rare path, so plain GETs do.
func (w *Watcher) adoptHolders(claimKey string) {
	ctx := w.ctx
	ns, name, _ := strings.Cut(claimKey, "/")
	c, err := w.cfg.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		w.cfg.Logger.Warn("read claim to adopt its pods", "claim", claimKey, "error", err)
		return
	}
	for _, ref := range c.Status.ReservedFor {
		if ref.Resource != "pods" {
			continue
		}
		pod, err := w.cfg.Kube.CoreV1().Pods(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			w.cfg.Logger.Warn("read pod to adopt it", "pod", ns+"/"+ref.Name, "error", err)
			continue
		}
		podReader{w}.onPod(pod, "adopt")
	}
}

// taintKey is the reporter key under which a driver's own taint reports a device.
func taintKey(id device.ID) string { return "slicetaint:" + id.String() }

// reportTaint reports a device its driver tainted as Unhealthy, with exact identity.
func (sr sliceReader) reportTaint(id device.ID, slice, node, msg string) {
	w := sr.w
	w.detectorSpoke.Store(true) // the driver names no Pod either
	w.podMu.Lock()
	ids, _ := w.store.setPod(taintKey(id), "", []Report{{Device: id, Node: node, Health: device.Unhealthy, Message: msg,
		Source: devicemsg.SourceSlice, Reporter: api.Reporter{Slice: slice, Health: device.Unhealthy}}}, nil, nil, false)

	w.podMu.Unlock()
	w.enqueueAll(ids)
}

// withdrawTaint takes the report back when the driver untaints the device; its workflow hears
// that the driver vouches for it again, which may start a quarantined device's recovery review.
func (sr sliceReader) withdrawTaint(id device.ID) {
	w := sr.w
	w.podMu.Lock()
	ids, _ := w.store.setPod(taintKey(id), "", nil, nil, nil, false)
	w.store.clearedByDriver(id, devicemsg.SourceSlice)
	w.podMu.Unlock()
	w.enqueueAll(append(ids, w.unitID(id)))
}
