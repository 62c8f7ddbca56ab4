package watcher

import (
	"maps"
	"slices"

	"github.com/devicewarden/devicewarden/internal/device"
)

// A level a detector shows (DCGM's recovery action other than none, a failing health watch, a
// row-remap failure) is a fault when it appears, sent once like every detector's fault
// (once.go). Withdrawn, it still stands while the level lasts: the device's observations name it
// (Observation.Standing), and a review does not release the device until it is gone (proof from
// the source). The watcher says so when the level goes: its series leaves the query's answer.

// keepStanding keeps a withdrawn level's word standing: its report says what it stands as
// (Report.Stands), unless the level went before the word was delivered. Callers hold s.mu.
func (s *store) keepStanding(e *entry, key string) {
	rs := e.reports[key]
	if len(rs) == 0 || rs[0].Stands == "" {
		return
	}
	if e.standing == nil {
		e.standing = map[string]string{}
	}
	e.standing[key] = rs[0].Stands
}

// levelGone says that key's level went, and returns the device whose observation changes with
// it (none when nothing stood). A word of it not yet delivered is still delivered, as the fault
// it was, and does not stand.
func (s *store) levelGone(key string, id device.ID) []device.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid := s.unitID(id)
	e := s.devices[uid]
	if e == nil {
		return nil
	}
	for i := range e.reports[key] {
		e.reports[key][i].Stands = ""
	}
	if e.standing[key] == "" {
		return nil
	}
	delete(e.standing, key)
	return []device.ID{uid}
}

// standingOf lists the words that stand for the device, in a stable order.
func standingOf(e *entry) []string {
	if len(e.standing) == 0 {
		return nil
	}
	return slices.Sorted(maps.Values(e.standing))
}
