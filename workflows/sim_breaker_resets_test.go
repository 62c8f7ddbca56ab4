package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
)

// resetHold is how long a reset permit lasts unreleased; off the steps' gaps.
const resetHold = 6*time.Minute + 30*time.Second + 500*time.Millisecond

// resetGranted takes a reset permit the breaker gave: no more than the budget run at a time, and
// none is granted (to a device that holds none) while the devices whose resets failed within the
// window since the last resume reach the brake's limit.
func (m *breakerModel) resetGranted(req breaker.PermitRequest, sent, now time.Time) {
	m.expireResets(now)
	dev := req.Device.String()
	if _, holds := m.resets[dev]; holds {
		m.resets[dev] = maxTime(m.resets[dev], sent.Add(req.Hold))
		return // its own reset, asked again
	}
	if n := m.failedWithin(now); n >= m.cfg.ResetFailuresMax() {
		m.violate("a reset granted to %s while resets of %d devices failed within the window (the brake holds at %d)", dev, n, m.cfg.ResetFailuresMax())
	}
	m.resets[dev] = sent.Add(req.Hold)
	if len(m.resets) > m.cfg.Resets() {
		m.violate("%d resets running at once, over the budget of %d", len(m.resets), m.cfg.Resets())
	}
}

func (m *breakerModel) expireResets(now time.Time) {
	for d, until := range m.resets {
		if !now.Before(until) {
			delete(m.resets, d)
			m.lapsed = append(m.lapsed, resetFailure{device: d, at: until})
		}
	}
	slices.SortFunc(m.lapsed, func(a, b resetFailure) int { return a.at.Compare(b.at) })
}

// failedWithin counts the devices whose resets failed within the window.
func (m *breakerModel) failedWithin(now time.Time) int {
	devices := map[string]bool{}
	for _, f := range m.failures {
		if f.at.After(now.Add(-m.cfg.Window)) {
			devices[f.device] = true
		}
	}
	return len(devices)
}

// ended says whether a reset's end counts: its permit is held, or lapsed within the window (each
// lapsed permit counts once).
func (m *breakerModel) ended(dev string, now time.Time) bool {
	if _, held := m.resets[dev]; held {
		delete(m.resets, dev)
		return true
	}
	m.lapsed = slices.DeleteFunc(m.lapsed, func(f resetFailure) bool { return !f.at.After(now.Add(-m.cfg.Window)) })
	i := slices.IndexFunc(m.lapsed, func(f resetFailure) bool { return f.device == dev })
	if i < 0 {
		return false
	}
	m.lapsed = slices.Delete(m.lapsed, i, i+1)
	return true
}

// resetSteps are a device's reset asked for, and a reset that ends (passed or failed).
func (m *breakerModel) resetStep(rt *rapid.T, kind string, i, devices int, tl *timeline) step {
	d := rapid.IntRange(0, devices-1).Draw(rt, fmt.Sprintf("resetDevice%d", i))
	id := device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: fmt.Sprintf("gpu-%d", d)}
	if kind == "reset" {
		req := breaker.PermitRequest{Device: id, Action: breaker.Reset, Hold: resetHold, Config: m.cfg}
		what := fmt.Sprintf("reset of gpu-%d", d)
		return step{what: what, do: m.acquire(what, req, m.resetGranted)}
	}
	failed := rapid.Bool().Draw(rt, fmt.Sprintf("resetFailed%d", i))
	s := step{at: tl.own(), what: fmt.Sprintf("gpu-%d's reset ends (failed %v)", d, failed)}
	s.do = func(env *testsuite.TestWorkflowEnvironment) {
		m.expireResets(env.Now())
		if m.ended(id.String(), env.Now()) && failed {
			m.failures = append(m.failures, resetFailure{device: id.String(), at: env.Now()})
		}
		m.signal(env, api.SignalPermitRelease, breaker.PermitRelease{Key: id.String(), Holder: id.String(), Failed: failed, Reason: "exit 1"})
	}
	return s
}
