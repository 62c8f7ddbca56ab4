package workflows

import (
	"slices"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// gpu0Unit is gpu-0 of node-1 published whole and as two partitions, as the watcher reports it.
func gpu0Unit(devices ...string) *device.Unit {
	return &device.Unit{ID: device.UnitID{Driver: gpu0.Driver, Pool: gpu0.Pool, Key: "counters=gpu-0-counters"},
		Devices: devices, Whole: "gpu-0"}
}

// A unit's workflow makes one decision on reports from two partitions: one permit, one
// quarantine over every form. A partition published while it is fenced is fenced as well; the
// probe runs on the whole device, and the release takes every form's rule away.
func TestUnitIsFencedProbedAndReleasedAsOne(t *testing.T) {
	h := newHarness(0)
	unit := gpu0Unit("gpu-0", "gpu-0-mig-a", "gpu-0-mig-b")
	id := unit.Device()
	obs := func(at time.Duration, ver string, u *device.Unit) {
		h.env.RegisterDelayedCallback(func() {
			h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: id, Node: "node-1", Health: device.Unhealthy, StatusVersion: ver,
				Reporters: []decide.Reporter{{Namespace: "ns", Pod: "a", Device: "gpu-0-mig-a", Health: device.Unhealthy},
					{Namespace: "ns", Pod: "b", Device: "gpu-0-mig-b", Health: device.Unhealthy}},
				Unit: u})
		}, at)
	}
	obs(time.Second, "10", unit)
	obs(time.Minute, "11", gpu0Unit("gpu-0", "gpu-0-mig-a", "gpu-0-mig-b", "gpu-0-mig-c"))
	h.env.RegisterDelayedCallback(func() { // the Pods leave: their sources say nothing against it
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: id, Node: "node-1", Health: device.Healthy, StatusVersion: "12",
			Unit: gpu0Unit("gpu-0", "gpu-0-mig-a", "gpu-0-mig-b", "gpu-0-mig-c")})
	}, time.Hour)
	p := policy.Default()
	p.Identity = []string{"uuid"}
	var got decide.DeviceState
	queryThenCancel(t, h.env, 25*time.Hour, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: id, Node: "node-1", Policy: p})

	if h.permits != 1 {
		t.Fatalf("%d permits for one physical GPU, want 1", h.permits)
	}
	var fenced [][]string
	for _, q := range h.quarantine {
		if q.Device != id {
			t.Fatalf("quarantine of %s, want the unit %s", q.Device, id)
		}
		fenced = append(fenced, q.Members)
	}
	want := [][]string{{"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b"}, {"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b", "gpu-0-mig-c"}}
	if len(fenced) != 2 || !slices.Equal(fenced[0], want[0]) || !slices.Equal(fenced[1], want[1]) {
		t.Fatalf("quarantine calls cover %v, want %v", fenced, want)
	}
	if q := h.quarantine[1]; q.Key != decide.TaintQuarantine || q.Decision != "" || q.Reason != h.quarantine[0].Reason {
		t.Fatalf("the new partition's fence %+v: want the quarantine's key and reason, no second decision", q)
	}
	for _, r := range h.ran {
		if r.Device.Device != "gpu-0" {
			t.Fatalf("%s ran on %s, want the whole device gpu-0", r.Kind, r.Device)
		}
	}
	if len(h.ran) != 2 {
		t.Fatalf("checks %+v, want a probe and a canary", h.ran)
	}
	if len(h.refreshed) != 1 || !slices.Equal(h.refreshed[0].Members, want[1]) {
		t.Fatalf("probation refresh %+v, want every form", h.refreshed)
	}
	// Released and held by no Pod, the workflow ends: the release call is the evidence.
	if len(h.released) != 1 || !slices.Equal(h.released[0].Members, want[1]) {
		t.Fatalf("state %s, release calls %+v", got.State, h.released)
	}
}

// A unit whose driver offers no whole form is proven on every form, and one failing form fails
// the probe.
func TestUnitWithoutAWholeFormIsProbedOnEveryForm(t *testing.T) {
	h := newHarness(0)
	unit := gpu0Unit("gpu-0-mig-a", "gpu-0-mig-b")
	unit.Whole = ""
	h.checks = []decide.StepResult{{Passed: true, Reason: "exit 0"}, {Passed: false, Reason: "exit 1"}}
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: unit.Device(), Node: "node-1", Health: device.Unhealthy,
			StatusVersion: "10", Unit: unit, Reporters: []decide.Reporter{{Namespace: "ns", Pod: "a", Device: "gpu-0-mig-a", Health: device.Unhealthy}}})
	}, time.Second)
	p := policy.Default()
	p.Identity = []string{"uuid"}
	var got decide.DeviceState
	queryThenCancel(t, h.env, 25*time.Hour, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: unit.Device(), Node: "node-1", Policy: p})
	var on []string
	for _, r := range h.ran[:min(2, len(h.ran))] {
		on = append(on, r.Device.Device)
	}
	if !slices.Equal(on, []string{"gpu-0-mig-a", "gpu-0-mig-b"}) {
		t.Fatalf("first probe ran on %v, want both forms", on)
	}
	if got.LastProbe == nil || got.LastProbe.Passed || got.LastProbe.Reason != "gpu-0-mig-b: exit 1" {
		t.Fatalf("last probe %+v, want gpu-0-mig-b's failure", got.LastProbe)
	}
}

// A report for a unit that arrives without its devices (its slices not listed) fences nothing:
// the action waits, and goes through once a report names the devices.
func TestUnitReportWithoutItsDevicesWaits(t *testing.T) {
	h := newHarness(0)
	unit := gpu0Unit("gpu-0", "gpu-0-mig-a")
	send := func(at time.Duration, ver string, u *device.Unit) {
		h.env.RegisterDelayedCallback(func() {
			h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: unit.Device(), Node: "node-1", Health: device.Unhealthy,
				StatusVersion: ver, Unit: u, Reporters: []decide.Reporter{{Namespace: "ns", Pod: "a", Device: "gpu-0-mig-a", Health: device.Unhealthy}}})
		}, at)
	}
	send(time.Second, "10", nil)
	var held decide.DeviceState
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryState)
		if err != nil || v.Get(&held) != nil {
			t.Errorf("query: %v", err)
		}
	}, 10*time.Second)
	send(time.Minute, "11", unit)
	var got decide.DeviceState
	queryThenCancel(t, h.env, 2*time.Minute, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: unit.Device(), Node: "node-1", Policy: policy.Default()})
	if held.Held == nil || held.HeldReason != "the unit's devices are not known yet" || held.State != decide.Healthy {
		t.Fatalf("before the devices are known: state %s, held %+v (%s)", held.State, held.Held, held.HeldReason)
	}
	if got.State != decide.Quarantined || len(h.quarantine) != 1 || !slices.Equal(h.quarantine[0].Members, unit.Devices) {
		t.Fatalf("after: state %s, quarantine calls %+v", got.State, h.quarantine)
	}
}

// A unit with no whole form is reset once, through its first form, under one permit: a reset
// resets the physical GPU whichever form it runs on (#52: it was reset once per form). The review
// after it still probes every form.
func TestUnitWithoutAWholeFormIsResetOnce(t *testing.T) {
	h := newHarness(0)
	unit := gpu0Unit("gpu-0-mig-a", "gpu-0-mig-b", "gpu-0-mig-c")
	unit.Whole = ""
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: unit.Device(), Node: "node-1", Health: device.Unhealthy,
			StatusVersion: "10", Unit: unit, Reporters: []decide.Reporter{{Namespace: "ns", Pod: "a", Device: "gpu-0-mig-a", Health: device.Unhealthy}}})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalObservation, decide.Observation{Device: unit.Device(), Node: "node-1", Health: device.Healthy,
			StatusVersion: "11", Unit: unit})
	}, time.Minute)
	p := laddered()
	p.Identity = []string{"uuid"}
	var got decide.DeviceState
	queryThenCancel(t, h.env, time.Hour, &got)
	h.env.ExecuteWorkflow(DeviceWorkflow, api.DeviceInput{Device: unit.Device(), Node: "node-1", Policy: p})
	var resets, probes []string
	for _, r := range h.ran {
		switch r.Kind {
		case decide.ActRepair:
			resets = append(resets, r.Device.Device)
		case decide.ActProbe:
			probes = append(probes, r.Device.Device)
		}
	}
	if !slices.Equal(resets, []string{"gpu-0-mig-a"}) || len(probes) != 3 || len(h.resetAsks) != 1 {
		t.Fatalf("resets on %v (%d permits), probes on %v", resets, len(h.resetAsks), probes)
	}
}
