package watcher

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
)

// A fault's word is withdrawn once delivered; the withdrawal waits until the device's detectors
// have been quiet for a while, and a new word meanwhile goes at once.
func TestAWithdrawalWaitsForQuiet(t *testing.T) {
	s := newStore()
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	t0 := time.Now()
	word := func(key, once string) {
		s.setPod(key, "", []Report{{Device: id, Node: "node-1", Health: device.Unhealthy,
			Reporter: api.Reporter{Report: key, Detector: "dcgm", Health: device.Unhealthy}, Once: once}}, nil, nil, false)
	}
	deliver := func(at time.Time) api.Observation {
		t.Helper()
		obs, d := s.next(id, at, time.Minute, nil)
		if d != doSignal {
			t.Fatalf("at +%s: decision %d, want a signal", at.Sub(t0), d)
		}
		s.markSignalled(obs, at)
		return obs
	}
	word("a", "a@1")
	if obs := deliver(t0); obs.Health != device.Unhealthy || len(obs.Reporters) != 1 {
		t.Fatalf("the fault %+v", obs)
	}
	if keys := s.consume(id, t0.Add(5*time.Second)); len(keys) != 1 {
		t.Fatalf("consumed %v", keys)
	}
	if _, d := s.next(id, t0.Add(time.Second), time.Minute, nil); d != skipQuiet {
		t.Fatalf("decision %d a second later, want to wait", d)
	}
	if q := s.quietFor(id, t0.Add(time.Second)); q != 4*time.Second {
		t.Fatalf("waits %s more", q)
	}
	word("b", "b@1") // a second fault 2 s later goes at once
	if obs := deliver(t0.Add(2 * time.Second)); len(obs.Reporters) != 1 || obs.Reporters[0].Report != "b" {
		t.Fatalf("the second fault %+v", obs)
	}
	s.consume(id, t0.Add(7*time.Second))
	if _, d := s.next(id, t0.Add(6*time.Second), time.Minute, nil); d != skipQuiet {
		t.Fatalf("decision %d, want to wait for the second fault's quiet", d)
	}
	if obs := deliver(t0.Add(7 * time.Second)); len(obs.Reporters) != 0 || obs.Health != device.Healthy {
		t.Fatalf("the withdrawal %+v", obs)
	}
}
