package workflows

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// breakerModel counts what the breaker granted, per budget, since the last resume.
type breakerModel struct {
	carrier
	simLog
	cfg      policy.BreakerConfig
	grants   map[string][]breakerGrant // budget -> new grants
	pausedAt time.Time                 // a pause sent at, zero after a resume
	updates  []*simUpdate
}

type breakerGrant struct {
	at  time.Time
	key string
}

// budget is the budget an action draws on: restrictions have their own.
func budget(a policy.State) string {
	if a == policy.Restricted {
		return "restrictions"
	}
	return "actions"
}

// granted takes a grant the breaker gave at now: a device (and action) already granted within the
// window is not a new grant.
func (m *breakerModel) granted(req policy.PermitRequest, sent, now time.Time) {
	b := budget(req.Action)
	key := req.Key() + "/" + string(req.Action)
	if !m.pausedAt.IsZero() && sent.After(m.pausedAt) {
		m.violate("%s granted while the breaker was paused by hand", key) // a repeat of a grant too
	}
	var kept []breakerGrant
	for _, g := range m.grants[b] {
		if g.at.After(now.Add(-m.cfg.Window)) {
			kept = append(kept, g)
		}
	}
	m.grants[b] = kept
	for _, g := range kept {
		if g.key == key {
			return
		}
	}
	m.grants[b] = append(kept, breakerGrant{at: now, key: key})
	if n, limit := len(m.grants[b]), m.cfg.Limit(0); n > limit {
		m.violate("%d %s granted within %s, over the cap of %d", n, b, m.cfg.Window, limit)
	}
}

func breakerSteps(rt *rapid.T, m *breakerModel) []step {
	n := rapid.IntRange(1, 60).Draw(rt, "steps")
	devices := rapid.IntRange(1, 12).Draw(rt, "devices")
	var steps []step
	tl := &timeline{at: time.Second}
	for i := range n {
		gap := rapid.SampledFrom([]time.Duration{0, 0, time.Second, time.Minute, 4 * time.Minute, 11 * time.Minute}).Draw(rt, fmt.Sprintf("gap%d", i))
		s := step{at: tl.next(gap)}
		switch rapid.SampledFrom([]string{"acquire", "acquire", "acquire", "acquire", "pause", "resume", "wait", "continue-as-new"}).Draw(rt, fmt.Sprintf("kind%d", i)) {
		case "acquire":
			d := rapid.IntRange(0, devices-1).Draw(rt, fmt.Sprintf("device%d", i))
			action := rapid.SampledFrom([]policy.State{policy.Quarantined, policy.Restricted, policy.ActionMigrate}).Draw(rt, fmt.Sprintf("action%d", i))
			valid := rapid.IntRange(0, 9).Draw(rt, fmt.Sprintf("valid%d", i)) > 0
			req := policy.PermitRequest{Device: device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: fmt.Sprintf("gpu-%d", d)},
				Action: action, Config: m.cfg}
			if !valid {
				req.Device = device.ID{}
			}
			s.what = fmt.Sprintf("acquire %s for gpu-%d (valid %v)", action, d, valid)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				sent := env.Now()
				u := &simUpdate{what: s.what}
				m.updates = append(m.updates, u)
				sendUpdate(env, UpdateAcquire, req, u, nil, func(v any, _ error) {
					r, _ := v.(policy.PermitResult)
					m.note("  %s: granted %v %s", s.what, r.Granted, r.Reason)
					if r.Granted {
						m.granted(req, sent, env.Now())
					}
				})
			}
		case "pause":
			s.what = "pause"
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				if m.pausedAt.IsZero() {
					m.pausedAt = env.Now()
				}
				m.signal(env, SignalBreakerPause, BreakerSignal{Actor: simActor, Reason: "simulated"})
			}
		case "resume":
			// A resume gets an instant of its own: requests answered in the same instant may have
			// been decided before or after it, and the model could not tell which window they are in.
			s.at = tl.own()
			s.what = "resume"
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				m.pausedAt = time.Time{}
				m.grants = map[string][]breakerGrant{}
				m.signal(env, SignalBreakerResume, BreakerSignal{Actor: simActor})
			}
		case "wait":
			d := rapid.IntRange(0, devices-1).Draw(rt, fmt.Sprintf("waiter%d", i))
			s.what = fmt.Sprintf("wait gpu-%d", d)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				m.signal(env, SignalBreakerWait, []string{fmt.Sprintf("gpu.sim.devicewarden.io/node-1/gpu-%d", d)})
			}
		case "continue-as-new":
			s = continueAsNewStep(tl)
		}
		steps = append(steps, s)
	}
	return steps
}

// TestSimulateBreakerWorkflow runs generated sequences of permit requests (up to 12 devices, every
// action, invalid ones, many in the same instant), pauses, resumes, wait-list hand-overs and
// continue-as-new through the breaker, holding it to: no budget grants more than its cap in any
// window (a device already granted in the window is not a new grant); nothing is granted while it
// is paused by hand; every request is answered (a refusal with its reason); the state query answers.
func TestSimulateBreakerWorkflow(t *testing.T) { simulate(t, 300, breakerProperty) }

func breakerProperty(rt *rapid.T) {
	m := &breakerModel{grants: map[string][]breakerGrant{},
		cfg: policy.BreakerConfig{Window: 10 * time.Minute, MaxCount: rapid.IntRange(1, 5).Draw(rt, "cap")}}
	steps := breakerSteps(rt, m)
	newEnv := quietEnv(func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterActivity(&activities.Activities{})
		env.OnActivity("Alert", mock.Anything, mock.Anything).Return(func(context.Context, activities.AlertInput) error { return nil }).Maybe()
		env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, SignalBreakerWake, mock.Anything).Return(nil).Maybe()
	})
	check := func(env *testsuite.TestWorkflowEnvironment, after string) {
		m.stepped(env, after)
		var st policy.BreakerState
		if m.look(env, after, &st) {
			m.note("  state: open %v (%s), grants %v, resumed %s", st.Open, st.Reason, st.Grants, st.ResumedAt.Format("15:04:05"))
		}
	}
	end := steps[len(steps)-1].at + time.Minute
	if err := segments(rt, &m.carrier, BreakerWorkflow, BreakerInput{}, false, end, steps, newEnv, check); err != nil {
		m.violate("the workflow failed: %v", err)
	}
	m.checkAnswered(m.updates)
	m.checkRefusals(m.updates)
	m.fail(rt)
}
