package watcher

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// unitInfo is what groups a slice's devices into physical units: the counter sets each draws on
// and how much of each counter, the counter sets the slice offers, and each device's value of
// the driver's grouping attribute when the policy names one. Devices that draw on nothing and
// carry no such attribute are not listed.
type unitInfo struct {
	counterSets map[string][]string
	takes       map[string]map[string]resource.Quantity // device -> "set/counter" -> amount
	capacity    map[string]resource.Quantity            // "set/counter" -> what the set holds
	attr        map[string]string
}

// add records one device of the slice.
func (u *unitInfo) add(driver string, d resourcev1.Device, g device.Grouping) {
	for _, c := range d.ConsumesCounters {
		if u.counterSets == nil {
			u.counterSets, u.takes = map[string][]string{}, map[string]map[string]resource.Quantity{}
		}
		u.counterSets[d.Name] = append(u.counterSets[d.Name], c.CounterSet)
		for name, v := range c.Counters {
			if u.takes[d.Name] == nil {
				u.takes[d.Name] = map[string]resource.Quantity{}
			}
			u.takes[d.Name][c.CounterSet+"/"+name] = v.Value
		}
	}
	if g.Attribute == "" {
		return
	}
	if v, ok := attributeValues(driver, d, []string{g.Attribute})[g.Attribute]; ok {
		if u.attr == nil {
			u.attr = map[string]string{}
		}
		u.attr[d.Name] = v
	}
}

// grouped says whether any device of the slice may share a unit with another.
func (u *unitInfo) grouped() bool { return len(u.counterSets) > 0 || len(u.attr) > 0 }

// addCounters records the counter sets a slice offers.
func (u *unitInfo) addCounters(sets []resourcev1.CounterSet) {
	for _, s := range sets {
		for name, c := range s.Counters {
			if u.capacity == nil {
				u.capacity = map[string]resource.Quantity{}
			}
			u.capacity[s.Name+"/"+name] = c.Value
		}
	}
}

// poolUnits are a pool's units under one grouping, built from its slices when first asked for
// and dropped when any slice of the pool changes.
type poolUnits struct {
	grouping device.Grouping
	byDevice map[string]*device.Unit
	byKey    map[string]*device.Unit
}

// unit is the physical unit of a published device under the grouping, from every slice of its
// pool; false when no slice publishes the device.
func (x *sliceIndex) unit(id device.ID, g device.Grouping) (device.Unit, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	u := x.poolUnits(poolKey{id.Driver, id.Pool}, g).byDevice[id.Device]
	if u == nil {
		return device.Unit{}, false
	}
	return *u, true
}

// unitByKey is the unit a shared unit's ID names (device.Unit.Device), as its pool publishes it now.
func (x *sliceIndex) unitByKey(id device.ID, g device.Grouping) (device.Unit, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	u := x.poolUnits(poolKey{id.Driver, id.Pool}, g).byKey[id.Device]
	if u == nil {
		return device.Unit{}, false
	}
	return *u, true
}

// successor is what became of a unit whose key its pool no longer publishes (a counter set
// renamed, a form drawing on a second set, the policy's grouping edited): the unit under its old
// ID, with its devices as last known and those of every unit now published that shares one of
// them. Its workflow may still fence the old forms, and must hear of the new ones: a form
// published under the new key would otherwise stay unfenced until a report started the new
// key's workflow. False when no published unit shares a device with it.
func (x *sliceIndex) successor(last device.Unit, g device.Grouping) (device.Unit, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	pu := x.poolUnits(poolKey{last.ID.Driver, last.ID.Pool}, g)
	out := device.Unit{ID: last.ID, Devices: slices.Clone(last.Devices)}
	var heirs []*device.Unit
	for _, d := range last.Devices {
		if u := pu.byDevice[d]; u != nil && !slices.Contains(heirs, u) {
			heirs = append(heirs, u)
		}
	}
	for _, u := range heirs {
		for _, d := range u.Devices {
			if !slices.Contains(out.Devices, d) {
				out.Devices = append(out.Devices, d)
			}
		}
	}
	if len(heirs) == 1 {
		out.Whole = heirs[0].Whole
	}
	slices.Sort(out.Devices)
	return out, len(heirs) > 0
}

// poolUnits returns the pool's units, building them if needed. Callers hold x.mu.
func (x *sliceIndex) poolUnits(pk poolKey, g device.Grouping) *poolUnits {
	if pu := x.units[pk]; pu != nil && pu.grouping == g {
		return pu
	}
	seen := map[string]bool{}
	capacity := map[string]resource.Quantity{}
	var offers []device.Offer
	var takes []map[string]resource.Quantity
	for name := range x.poolSlices[pk] {
		s := x.slices[name]
		for k, v := range s.units.capacity {
			capacity[k] = v
		}
		for _, d := range s.devices {
			if seen[d] {
				continue
			}
			seen[d] = true
			o := device.Offer{Name: d, CounterSets: s.units.counterSets[d]}
			if v, ok := s.units.attr[d]; ok {
				o.Attributes = map[string]string{g.Attribute: v}
			}
			offers = append(offers, o)
			takes = append(takes, s.units.takes[d])
		}
	}
	for i := range offers {
		offers[i].Whole = takesAll(offers[i].CounterSets, takes[i], capacity)
	}
	pu := &poolUnits{grouping: g, byDevice: map[string]*device.Unit{}, byKey: map[string]*device.Unit{}}
	for _, u := range device.Units(pk.driver, pk.pool, offers, g) {
		u := u
		pu.byKey[u.ID.Key] = &u
		for _, d := range u.Devices {
			pu.byDevice[d] = &u
		}
	}
	x.units[pk] = pu
	return pu
}

// takesAll says whether a device takes every counter of every set it draws on in full: it is the
// whole device, and no other form fits beside it.
func takesAll(sets []string, takes map[string]resource.Quantity, capacity map[string]resource.Quantity) bool {
	if len(sets) == 0 {
		return false
	}
	counted := 0
	for key, cap := range capacity {
		if !slices.Contains(sets, key[:strings.LastIndexByte(key, '/')]) {
			continue
		}
		counted++
		if v, ok := takes[key]; !ok || v.Cmp(cap) < 0 {
			return false
		}
	}
	return counted > 0
}

// unitOf names the shared physical unit a published device is a form of, with the device's name
// in it; a device that is a unit of its own (or not published, or a unit's ID) is its own ID with
// no name. The policy's drivers section says how the driver's devices group.
func (w *Watcher) unitOf(id device.ID) (device.ID, string) {
	if w.slices.grouping.Load() == 0 || id.DevicePlugin() || device.IsUnitKey(id.Device) {
		return id, ""
	}
	u, ok := w.slices.unit(id, w.cfg.Policies.Units(id.Driver))
	if !ok || !u.Shared() {
		return id, ""
	}
	return u.Device(), id.Device
}

// unitID is the ID a device's reports and workflow go by.
func (w *Watcher) unitID(id device.ID) device.ID {
	u, _ := w.unitOf(id)
	return u
}

// adoptHoldersOf looks at the Pods of every claim allocated any of the devices (a unit's forms,
// or one device): a Pod on a sibling partition that reports Healthy, or one whose device only a
// detector spoke of, still runs on the failing hardware, and its workflow must know it to move it.
func (w *Watcher) adoptHoldersOf(ids []device.ID) {
	for _, claim := range w.claims.holdingAny(ids) {
		w.adoptHolders(claim)
	}
}

// silentHolders are the reports a Pod makes by holding a followed device (or a form of a followed
// shared unit) without reporting its health: its Pod is on the failing hardware all the same, so
// the workflow counts it among the holders (Healthy: it said nothing against the device). Until a
// driver publishes shared units or a detector reports a device, only a Pod's own report makes it a
// holder, and the common fleet pays nothing here.
func (w *Watcher) silentHolders(pod *corev1.Pod, reports []Report) []Report {
	if w.slices.grouping.Load() == 0 && !w.detectorSpoke.Load() {
		return nil
	}
	var out []Report
	for _, ref := range ClaimRefs(pod) {
		ns, name, _ := strings.Cut(ref, "/")
		c, ok := w.claims.get(ns, name)
		if !ok {
			continue
		}
		for r := range c.Results() {
			id := device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
			u, _ := w.unitOf(id)
			if !(followed{w.store}).follows(u) || slices.ContainsFunc(reports, func(r Report) bool { return r.Device == id }) {
				continue
			}
			out = append(out, Report{Device: id, Node: pod.Spec.NodeName, Health: device.Healthy,
				Reporter: api.Reporter{Namespace: pod.Namespace, Pod: pod.Name, Claim: name, Health: device.Healthy, Silent: true}})
		}
	}
	return out
}

// UnitOf is the physical unit of a device as the given slices publish its pool, under the
// policy's grouping of its driver, and the node of the pool; false when no slice publishes the
// device. It is for callers without a watcher (an operator command), which list the slices.
func UnitOf(slices []resourcev1.ResourceSlice, id device.ID, pols *policy.Set) (device.Unit, string, bool) {
	x := newSliceIndex()
	node := ""
	for i := range slices {
		s := &slices[i]
		if s.Spec.Driver != id.Driver || s.Spec.Pool.Name != id.Pool {
			continue
		}
		info := sliceInfoOf(s, pols, &x.intern)
		if info.node != "" {
			node = info.node
		}
		x.set(s.Name, info)
	}
	u, ok := x.unit(id, pols.Units(id.Driver))
	return u, node, ok
}
