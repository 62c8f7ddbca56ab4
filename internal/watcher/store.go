package watcher

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// store aggregates reports per device across every pod that holds it and remembers what was
// last signalled, so unchanged devices cost Temporal nothing. It holds only devices that reported
// something other than Healthy or that have a workflow, and only the pods reporting them.
type store struct {
	mu      sync.Mutex
	devices map[device.ID]*entry
	// podDevices remembers which devices each pod reported, to retract them on change or delete.
	podDevices map[string][]device.ID
	// pods are the tracked pods (stripped), for re-resolution when one of their claims changes.
	pods map[string]*corev1.Pod
	// claimPods indexes tracked pods by the claims they use (namespace/name -> pod keys).
	claimPods map[string]map[string]struct{}
	// seen collects tracked pods seen during a relist; nil when not relisting.
	seen map[string]struct{}
	// outages holds nodes in an outage (Ready Unknown), with the reason.
	outages map[string]string
	// term and counter order this watcher's observations (devicemsg.Seq): a watcher started later,
	// a new leader, has a larger term (Config.Term).
	term    int64
	counter uint64
	// unread: the detectors that keep standing words (Prometheus' level signals) are not read
	// yet, so what stands is not known: observations say so (Observation.StandingUnread).
	unread bool
	// unitOf names the shared physical unit a device is a form of, and the device's name in it
	// ("" when the device is a unit of its own): the unit's forms report as one (units.go).
	unitOf func(device.ID) (device.ID, string)
}

type entry struct {
	reports map[string][]Report // by pod key
	version uint64              // highest pod resourceVersion that touched this device
	// signalled is what the device workflow last received; nil means no workflow was signalled.
	signalled   *api.Observation
	signalledAt time.Time
	// seeded marks a device whose workflow was running when the watcher started: whatever the
	// cluster says now is sent once, so nothing that changed while the watcher was down is missed.
	seeded bool
	// driverCleared: the driver took back its own word against the device (its slice taint, its
	// claim condition); the next observation says so with that source, which may start a
	// quarantined device's recovery review.
	driverCleared devicemsg.Source
	// sending: an observation is on its way to the workflow and not yet acknowledged. The
	// entry outlives its last report until then: the workflow may already act on the
	// observation (a rule made in the same task), and a holder gone meanwhile must still be told.
	sending bool
	// carrying names the one-time words (Report.Once) of the observation on its way, by reporter
	// key: those still current when it is acknowledged are withdrawn (once.go).
	carrying map[string]string
	// quietUntil: the withdrawal of words consumed is not sent before (once.go).
	quietUntil time.Time
	// standing are the withdrawn words of levels that still stand, by reporter key (standing.go).
	standing map[string]string
}

func newStore() *store {
	return &store{devices: map[device.ID]*entry{}, podDevices: map[string][]device.ID{},
		pods: map[string]*corev1.Pod{}, claimPods: map[string]map[string]struct{}{}, outages: map[string]string{},
		term: TermBase}
}

// stamp gives a new observation the next sequence of this watcher's term. Callers hold s.mu.
func (s *store) stamp(obs api.Observation) api.Observation {
	s.counter++
	obs.Seq = &devicemsg.Seq{Term: s.term, N: s.counter}
	obs.StandingUnread = s.unread
	return obs
}

// setOutage records (msg != "") or clears (msg == "") a node outage and returns the followed
// devices on that node, whose aggregate changes with it.
func (s *store) setOutage(node, msg string) []device.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg == "" {
		delete(s.outages, node)
	} else {
		s.outages[node] = msg
	}
	var ids []device.ID
	for id, e := range s.devices {
		if e.node() == node {
			ids = append(ids, id)
		}
	}
	return ids
}

// node is where the device was last reported.
func (e *entry) node() string {
	for _, rs := range e.reports {
		for _, r := range rs {
			if r.Node != "" {
				return r.Node
			}
		}
	}
	if e.signalled != nil {
		return e.signalled.Node
	}
	return ""
}

// setPod replaces a pod's reports and returns the devices whose reports changed, and how many
// devices it passed over: Healthy, without an entry, on a node not in an outage, which the worker
// would only forget again (skipHealthy). keep is the stripped pod to track, or nil to stop
// tracking it; a pod whose every report was passed over is not kept, as the worker would have
// untracked it once it forgot the last of them. reports is reordered.
func (s *store) setPod(podKey string, version string, reports []Report, claims []string, keep *corev1.Pod, unresolved bool) ([]device.ID, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Sorted by device (stably: each device's reports keep their order), each device's reports
	// are one run of the slice; no map per update.
	s.toUnits(reports)
	slices.SortStableFunc(reports, func(a, b Report) int { return compareID(a.Device, b.Device) })
	reported := func(id device.ID) bool {
		_, ok := slices.BinarySearchFunc(reports, id, func(r Report, id device.ID) int { return compareID(r.Device, id) })
		return ok
	}
	v, _ := strconv.ParseUint(version, 10, 64)
	var changed []device.ID
	for _, id := range s.podDevices[podKey] {
		if !reported(id) {
			if e := s.devices[id]; e != nil {
				delete(e.reports, podKey)
				e.version = max(e.version, v)
				s.gc(id, e)
			}
			changed = append(changed, id)
		}
	}
	var ids []device.ID
	passed := 0
	for i := 0; i < len(reports); {
		id, j := reports[i].Device, i+1
		for j < len(reports) && reports[j].Device == id {
			j++
		}
		rs := reports[i:j]
		i = j
		e := s.devices[id]
		if e == nil {
			if s.quiet(rs) {
				passed++
				continue
			}
			e = &entry{reports: map[string][]Report{}}
			s.devices[id] = e
		}
		ids = append(ids, id)
		if sameReports(e.reports[podKey], rs) {
			// An unrelated status change (readiness, restarts): nothing for this device.
			continue
		}
		e.reports[podKey] = slices.Clone(rs) // not a window on the whole pod's reports
		e.version = max(e.version, v)
		changed = append(changed, id)
	}
	if len(ids) == 0 {
		delete(s.podDevices, podKey)
		// A pod whose every report was passed over is not kept, unless one of its entries is still
		// unresolved: a claim that arrives later must find it to re-resolve the report.
		if len(reports) > 0 && !unresolved {
			keep = nil
		}
	} else {
		s.podDevices[podKey] = ids
	}
	s.untrack(podKey)
	if keep != nil {
		s.pods[podKey] = keep
		for _, c := range claims {
			if s.claimPods[c] == nil {
				s.claimPods[c] = map[string]struct{}{}
			}
			s.claimPods[c][podKey] = struct{}{}
		}
	}
	return changed, passed
}

// quiet: one pod's reports of a device that has no entry say only Healthy, on a node that
// heartbeats. Callers hold s.mu.
func (s *store) quiet(rs []Report) bool {
	for _, r := range rs {
		if r.Health != device.Healthy || r.Source != "" {
			return false
		}
		if _, down := s.outages[r.Node]; down {
			return false
		}
	}
	return true
}

func compareID(a, b device.ID) int {
	return cmp.Or(strings.Compare(a.Driver, b.Driver), strings.Compare(a.Pool, b.Pool), strings.Compare(a.Device, b.Device))
}

func sameReports(a, b []Report) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// untrack forgets a pod's stripped copy and claim index entries (callers hold mu).
func (s *store) untrack(podKey string) {
	pod := s.pods[podKey]
	if pod == nil {
		return
	}
	delete(s.pods, podKey)
	for _, c := range ClaimRefs(pod) {
		delete(s.claimPods[c], podKey)
		if len(s.claimPods[c]) == 0 {
			delete(s.claimPods, c)
		}
	}
}

// deletePod retracts a deleted pod's reports.
func (s *store) deletePod(podKey, version string) []device.ID {
	changed, _ := s.setPod(podKey, version, nil, nil, nil, false)
	return changed
}

// tracked reports whether the store holds a pod.
func (s *store) tracked(podKey string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pods[podKey]
	return ok
}

// forget drops a device that is Healthy and was never signalled, and any pod left with nothing.
func (s *store) forget(id device.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.devices[id]
	if e == nil || e.signalled != nil || e.seeded || e.sending {
		return
	}
	for _, rs := range e.reports {
		for _, r := range rs {
			if r.Health != device.Healthy {
				return
			}
		}
	}
	delete(s.devices, id)
	for podKey := range e.reports {
		left := slices.DeleteFunc(s.podDevices[podKey], func(d device.ID) bool { return d == id })
		if len(left) == 0 {
			delete(s.podDevices, podKey)
			s.untrack(podKey)
		} else {
			s.podDevices[podKey] = left
		}
	}
}

func (s *store) relistBegin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = map[string]struct{}{}
}

func (s *store) markSeen(podKey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen != nil {
		s.seen[podKey] = struct{}{}
	}
}

// relistEnd returns tracked pods a relist did not return: they were deleted meanwhile.
func (s *store) relistEnd() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	for k := range s.podDevices {
		if _, ok := s.seen[k]; !ok && isPodKey(k) {
			gone = append(gone, k)
		}
	}
	for k := range s.pods {
		if _, ok := s.seen[k]; !ok && s.podDevices[k] == nil {
			gone = append(gone, k)
		}
	}
	s.seen = nil
	return gone
}

// isPodKey tells a pod's key (namespace/name) from a reporter of the watcher's own
// ("resourceslice:...", "claimcondition:..."): namespaces and pod names never contain a colon.
func isPodKey(k string) bool { return !strings.Contains(k, ":") }

// seed marks devices that have running workflows.
func (s *store) seed(ids []device.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		e := s.devices[id]
		if e == nil {
			e = &entry{reports: map[string][]Report{}}
			s.devices[id] = e
		}
		e.seeded = true
	}
}

// gc forgets a device that nobody reports and that has no workflow.
func (s *store) gc(id device.ID, e *entry) {
	if len(e.reports) == 0 && e.signalled == nil && !e.sending {
		delete(s.devices, id)
	}
}

// decision is what the worker should do for one device.
type decision int

const (
	skipNothing   decision = iota // nothing known about the device
	skipHealthy                   // healthy and no workflow: costs Temporal nothing
	skipDuplicate                 // same health, message, reporters and unit as last signalled
	skipQuiet                     // a withdrawal waits until the device's detectors are quiet (once.go)
	doSignal
)

// next computes the device's aggregate observation and whether it must be signalled. A device
// with a workflow is re-signalled unchanged once per heartbeat interval, so the workflow can tell
// a current Healthy from a stale one.
func (s *store) next(id device.ID, now time.Time, heartbeat time.Duration, unit *device.Unit) (_ api.Observation, d decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.devices[id]
	defer func() {
		if d == doSignal {
			e.sending = true
		}
	}()
	if e == nil {
		return api.Observation{}, skipNothing
	}
	if len(e.reports) == 0 && now.Before(e.quietUntil) {
		return api.Observation{}, skipQuiet
	}
	if len(e.reports) == 0 {
		// No pod holds the device. Its workflow hears this once; then there is nothing to report.
		regrouped := unit != nil && e.signalled != nil && !sameUnit(e.signalled.Unit, unit)
		standing := standingOf(e)
		if !e.seeded && e.driverCleared == "" && (e.signalled == nil || len(e.signalled.Reporters) == 0 && slices.Equal(e.signalled.Standing, standing) && e.signalled.StandingUnread == s.unread) && !regrouped {
			return api.Observation{}, skipNothing
		}
		node := ""
		if e.signalled != nil {
			node = e.signalled.Node
		}
		version := "" // unknown after a restart: the workflow then orders by observation time
		if e.version > 0 {
			version = strconv.FormatUint(e.version, 10)
		}
		obs := api.Observation{Device: id, Node: node, Health: device.Healthy, StatusVersion: version, ObservedAt: now, Unit: unit, Standing: standing}
		obs.Source = e.driverCleared
		return s.stamp(obs), doSignal
	}
	obs := aggregate(id, e, now)
	obs.Unit, obs.Words = unit, wordHashes(carried(e))
	defer func() {
		if d == doSignal {
			e.carrying = carried(e)
		}
	}()
	if e.driverCleared != "" && obs.Health == device.Healthy {
		obs.Source = e.driverCleared
	}
	if msg, down := s.outages[obs.Node]; down && obs.Health == device.Healthy {
		// The node stopped heartbeating: its last Healthy reports are not current.
		obs.Health, obs.Message = device.Unknown, msg
	}
	switch {
	case e.seeded, e.driverCleared != "" && obs.Source == e.driverCleared:
		return s.stamp(obs), doSignal
	case e.signalled == nil && obs.Health == device.Healthy:
		return obs, skipHealthy
	case e.signalled != nil && e.signalled.Health == obs.Health && e.signalled.Message == obs.Message &&
		len(e.signalled.Reporters) > 0 && sameUnit(e.signalled.Unit, unit) && slices.Equal(e.signalled.Reporters, obs.Reporters) &&
		slices.Equal(e.signalled.Standing, obs.Standing) && e.signalled.StandingUnread == s.unread:
		if heartbeat > 0 && now.Sub(e.signalledAt) >= heartbeat {
			// Same content, version and sequence as last time: the workflow treats it as a heartbeat.
			return *e.signalled, doSignal
		}
		return obs, skipDuplicate
	}
	return s.stamp(obs), doSignal
}

// markSignalled records a delivered observation, and says whether it was the device's first.
func (s *store) markSignalled(obs api.Observation, now time.Time) (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.devices[obs.Device]; e != nil {
		e.sending = false
		if len(obs.Reporters) == 0 && len(e.reports) == 0 && len(e.standing) == 0 && !obs.StandingUnread && !device.IsUnitKey(obs.Device.Device) {
			// The workflow heard that no pod holds the device: nothing more to say, nothing to keep
			// (unless what stands was not read yet: it hears that once it is).
			// A shared unit is kept: a form published later must reach its workflow, which may
			// still fence it (one small entry per unit that ever had a workflow).
			delete(s.devices, obs.Device)
			return false
		}
		first = e.signalled == nil
		o := obs
		e.signalled, e.signalledAt, e.seeded, e.driverCleared = &o, now, false, ""
	}
	return first
}

// aggregate: the worst current report wins; every reporter is listed, in a stable order.
func aggregate(id device.ID, e *entry, now time.Time) api.Observation {
	obs := api.Observation{Device: id, Health: device.Healthy, StatusVersion: strconv.FormatUint(e.version, 10), ObservedAt: now}
	worst := -1
	pods := make([]string, 0, len(e.reports))
	for p := range e.reports {
		pods = append(pods, p)
	}
	slices.Sort(pods)
	class := ""          // a detector knows no class (no claim names it): the device's Pods' claims do
	var said cause.Cause // the first cause a detector gave for an Unhealthy word
	var causes []cause.Cause
	for _, p := range pods {
		for _, r := range e.reports[p] {
			obs.Reporters = append(obs.Reporters, r.Reporter)
			class = cmp.Or(class, r.DeviceClass)
			if r.Health == device.Unhealthy && r.Cause.Known() {
				causes = append(causes, r.Cause)
			}
			if r.Health == device.Unhealthy && !said.Known() {
				said = r.Cause
			}
			if sev := r.Health.Severity(); sev > worst || (sev == worst && r.Message > obs.Message) {
				worst = sev
				obs.Health, obs.Message, obs.Node, obs.DeviceClass, obs.Source, obs.Cause = r.Health, r.Message, r.Node, r.DeviceClass, r.Source, nil
				if r.Cause.Known() {
					c := r.Cause
					obs.Cause = &c
				}
			}
		}
	}
	obs.DeviceClass = cmp.Or(obs.DeviceClass, class)
	obs.Standing = standingOf(e)
	if obs.Health != device.Unhealthy {
		obs.Cause = nil
	} else if obs.Cause == nil && said.Known() {
		obs.Cause = &said // a detector said what a Pod's status or a driver's taint did not
	} else if obs.Cause == nil {
		// A Pod's status or a driver's taint says the cause in its message, if anywhere.
		if c := cause.Read("", "", obs.Message); c.Known() {
			obs.Cause = &c
		}
	}
	if obs.Cause != nil {
		// Several faults pending (XID 119 and XID 31): the device's wins over the application's.
		for _, c := range causes {
			if cause.Rank(c) > cause.Rank(*obs.Cause) {
				obs.Cause = &c
			}
		}
	}
	slices.SortFunc(obs.Reporters, func(a, b api.Reporter) int {
		return cmp.Or(strings.Compare(a.Namespace+"/"+a.Pod+"/"+a.Container+"/"+a.Claim, b.Namespace+"/"+b.Pod+"/"+b.Container+"/"+b.Claim),
			strings.Compare(a.Slice, b.Slice), strings.Compare(a.Report, b.Report))
	})
	return obs
}

// clearedByDriver notes that the driver took back its word against a device that has a
// workflow (source: how it had said it); it returns whether there is one to tell.
func (s *store) clearedByDriver(id device.ID, source devicemsg.Source) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.devices[s.unitID(id)]
	if e == nil || e.signalled == nil {
		return false
	}
	e.driverCleared = source
	return true
}

// unitID is the ID a device's reports go by: its shared unit's, or its own.
func (s *store) unitID(id device.ID) device.ID {
	if s.unitOf == nil {
		return id
	}
	u, _ := s.unitOf(id)
	return u
}

// toUnits files each report of a form of a shared unit under the unit, naming the form in its
// reporter.
func (s *store) toUnits(reports []Report) {
	if s.unitOf == nil {
		return
	}
	for i := range reports {
		if u, member := s.unitOf(reports[i].Device); member != "" {
			reports[i].Device, reports[i].Reporter.Device = u, member
		}
	}
}

// sameUnit: a unit whose devices changed (a partition published or withdrawn) is news to its
// workflow, which fences every device of it.
func sameUnit(a, b *device.Unit) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Whole == b.Whole && slices.Equal(a.Devices, b.Devices)
}

// unsent records that an observation did not reach the workflow: the entry goes if nothing else
// keeps it.
func (s *store) unsent(id device.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.devices[id]; e != nil {
		e.sending, e.carrying = false, nil
		s.gc(id, e)
	}
}
