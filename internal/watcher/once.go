package watcher

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/healthreport"
)

// A detector's fault (a DeviceHealthReport that says Unhealthy, a new XID in a DCGM series, a
// node condition naming a GPU) is an event, not a state: DCGM's XID gauge never goes back to
// zero, and a detector seldom writes that a device it reported works again. So the watcher sends
// the word once and withdraws it when the device's workflow has acknowledged it. The quarantine
// it started then stands for it (a breaker's hold included), and only the review brings the
// device back, as for every other fault. A later word (the report renewed, another XID) is a new
// event.

// carried names the one-time words an observation built from e now carries, by reporter key.
// Callers hold s.mu.
func carried(e *entry) map[string]string {
	var out map[string]string
	for key, rs := range e.reports {
		if w := onceWord(rs); w != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[key] = w
		}
	}
	return out
}

// wordHashes names the one-time words an observation carries (Observation.Words), sorted: a
// hash of each, so a node condition's long message costs the workflow's state 16 characters.
func wordHashes(words map[string]string) []string {
	if len(words) == 0 {
		return nil
	}
	out := make([]string, 0, len(words))
	for _, w := range words {
		sum := sha256.Sum256([]byte(w))
		out = append(out, hex.EncodeToString(sum[:8]))
	}
	slices.Sort(out)
	return out
}

// onceWord is the word a reporter's reports stand for when they are all one event ("" when any
// of them stands).
func onceWord(rs []Report) string {
	if len(rs) == 0 {
		return ""
	}
	for _, r := range rs {
		if r.Once == "" || r.Once != rs[0].Once {
			return ""
		}
	}
	return rs[0].Once
}

// consume withdraws the one-time words the acknowledged observation carried, unless a reporter
// said something new meanwhile; it returns the reporter keys withdrawn. The device's next
// observation says so.
func (s *store) consume(id device.ID, quietUntil time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.devices[id]
	if e == nil {
		return nil
	}
	var keys []string
	for key, w := range e.carrying {
		if onceWord(e.reports[key]) != w {
			continue // renewed meanwhile: the new word goes next
		}
		s.keepStanding(e, key)
		delete(e.reports, key)
		s.dropDevice(key, id)
		keys = append(keys, key)
	}
	e.carrying = nil
	if len(keys) > 0 {
		e.quietUntil = quietUntil
	}
	return keys
}

// quietFor is how long the device's withdrawal still waits.
func (s *store) quietFor(id device.ID, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.devices[id]; e != nil {
		return e.quietUntil.Sub(now)
	}
	return 0
}

// dropDevice forgets that a reporter reported the device. Callers hold s.mu.
func (s *store) dropDevice(key string, id device.ID) {
	ids := s.podDevices[key]
	for i, d := range ids {
		if d == id {
			ids = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(s.podDevices, key)
		return
	}
	s.podDevices[key] = ids
}

// detectorWord makes a detector's word about a device its reporter under key (a report's, a
// DCGM signal's, a node condition's), and queues the device: the word says what spec says, names
// the device's class (a detector knows no claim) and is one event when once is set.
func (w *Watcher) detectorWord(key, version string, id device.ID, node string, h device.Health, spec healthreport.Spec, once string) {
	w.enqueueAll(w.storeDetectorWord(key, version, id, node, h, spec, once, ""))
}

// storeDetectorWord is detectorWord without queueing, for a word that, once withdrawn, stands as
// stands while its level lasts (standing.go): it returns the devices to queue, for a reader that
// stores several words at once (one Prometheus answer's faults) and sends each device once.
func (w *Watcher) storeDetectorWord(key, version string, id device.ID, node string, h device.Health, spec healthreport.Spec, once, stands string) []device.ID {
	msg := spec.What()
	if len(msg) > devicemsg.MaxReason {
		msg = msg[:devicemsg.MaxReason]
	}
	shown := key
	if name, ok := reportName(key); ok {
		shown = name // a DeviceHealthReport is shown by its name
	}
	r := Report{Device: id, Node: node, Health: h, Message: msg, Source: devicemsg.SourceHealthReport, DeviceClass: w.claims.classOf(id),
		Cause:    spec.CauseOf(),
		Reporter: api.Reporter{Report: shown, Detector: spec.Source, Health: h}, Once: once, Stands: stands}
	w.detectorSpoke.Store(true)
	w.podMu.Lock()
	ids, _ := w.store.setPod(key, version, []Report{r}, nil, nil, false)
	w.podMu.Unlock()
	return ids
}
