package watcher

import (
	"iter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Views of the store by concept, each over the same state and its lock: what it follows (asked by
// the sources and the worker), and the start of a watcher's term.

// followed answers what the store follows: devices, units, reporters and their pods, and how
// current the workflows it signalled are.
type followed struct{ s *store }

// termStart begins a watcher's term: its observations' order, and the standing words the new term
// has not read yet.
type termStart struct{ s *store }

// follows reports whether the device has an entry.
func (v followed) follows(id device.ID) bool {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.devices[id]
	return ok
}

// followsAny reports whether any of the devices has an entry.
func (v followed) followsAny(devs iter.Seq[AllocatedDevice]) bool {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for d := range devs {
		if _, ok := s.devices[s.unitID(device.ID{Driver: d.Driver, Pool: d.Pool, Device: d.Device})]; ok {
			return true
		}
	}
	return false
}

// unitsIn are the followed shared units of a pool.
func (v followed) unitsIn(driver, pool string) []device.ID {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []device.ID
	for id := range s.devices {
		if id.Driver == driver && id.Pool == pool && device.IsUnitKey(id.Device) {
			out = append(out, id)
		}
	}
	return out
}

// lastUnit is the unit a followed unit's workflow last heard of; nil when it heard of none.
func (v followed) lastUnit(id device.ID) *device.Unit {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.devices[id]; e != nil && e.signalled != nil {
		return e.signalled.Unit
	}
	return nil
}

// signalledAny reports whether some device's workflow was signalled (it stops at the first).
func (v followed) signalledAny() bool {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.devices {
		if e.signalled != nil {
			return true
		}
	}
	return false
}

// oldestSignal is how long ago the device that waited longest was last delivered, among devices
// with a workflow and a reporting pod (the ones the heartbeat keeps current); zero when none.
func (v followed) oldestSignal(now time.Time) time.Duration {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest time.Duration
	for _, e := range s.devices {
		if e.signalled == nil || len(e.reports) == 0 {
			continue
		}
		if age := now.Sub(e.signalledAt); age > oldest {
			oldest = age
		}
	}
	return oldest
}

// hasReporter reports whether a reporter key (a pod, or a source of the watcher's own) has reports.
func (v followed) hasReporter(key string) bool {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.podDevices[key]
	return ok
}

// podsOfClaim lists the tracked pods that use a claim.
func (v followed) podsOfClaim(claim string) []*corev1.Pod {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(s.claimPods[claim]))
	for p := range s.claimPods[claim] {
		out = append(out, s.pods[p])
	}
	return out
}

// setTerm starts this watcher's term; its observations count from 1 again.
func (v termStart) setTerm(term int64) {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.term, s.counter = term, 0
}

// standingUnread says the standing words are not read yet: until standingRead, observations say so.
func (v termStart) standingUnread() {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unread = true
}

// standingRead says the detectors that keep standing words were read, and returns the devices
// last told that nothing was read: they hear what stands now.
func (v termStart) standingRead() []device.ID {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unread {
		return nil
	}
	s.unread = false
	var ids []device.ID
	for id, e := range s.devices {
		if e.signalled != nil && e.signalled.StandingUnread {
			ids = append(ids, id)
		}
	}
	return ids
}
