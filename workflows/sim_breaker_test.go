package workflows

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// breakerModel counts what the breaker granted, per budget, since the last resume.
type breakerModel struct {
	carrier
	simLog
	cfg      breaker.Config
	grants   map[string][]breakerGrant // budget -> new grants
	pausedAt time.Time                 // a pause sent at, zero after a resume
	updates  []*simUpdate
	// workers lease permits ahead and spend them in process; paused: a pause update was
	// answered (no leased permit may be spent until a resume).
	workers [3]simWorker
	paused  bool
	spends  int
	// mu: the breaker revokes on several workers' queues at once, each a goroutine of its own.
	mu sync.Mutex
	// nodes are the node permits the breaker granted and did not take back: node -> its holder.
	nodes map[string]nodePermit
	// resets are the reset permits held (device -> until); lapsed those whose hold ended before
	// their reset did (still counted when it ends failed, within the window); failures the failed
	// resets counted.
	resets   map[string]time.Time
	lapsed   []resetFailure
	failures []resetFailure
}

// resetFailure is a device's failed reset (at: when), or a lapsed permit (at: its hold's end).
type resetFailure struct {
	device string
	at     time.Time
}

// nodePermit is a node step's permit as the model holds it.
type nodePermit struct {
	pool, holder string
	until        time.Time
}

// simNodes are the nodes node steps ask for: two in pool a, one in pool b.
var simNodes = []struct{ name, pool string }{{"node-0", "a"}, {"node-1", "a"}, {"node-2", "b"}}

// nodeHold is how long a node permit lasts unreleased; off the steps' gaps, so no request comes
// in the instant one ends.
const nodeHold = 7*time.Minute + 30*time.Second + 500*time.Millisecond

// nodeGranted takes a node permit the breaker gave: a new one is held by the request's device, and
// no pool may hold more nodes than the budget.
func (m *breakerModel) nodeGranted(req breaker.PermitRequest, sent, now time.Time) {
	if !m.pausedAt.IsZero() && sent.After(m.pausedAt) {
		m.violate("node permit of %s granted while the breaker was paused by hand", req.Node)
	}
	m.expireNodes(now)
	if p, ok := m.nodes[req.Node]; ok {
		// Shared with the device that holds it, or asked again by it: either way a node step of
		// the node runs for up to a hold from now (one moving holders asks every 15 s, and
		// reboots on its last ask), so the node counts as held until then.
		p.until = maxTime(p.until, sent.Add(req.Hold))
		m.nodes[req.Node] = p
		return
	}
	m.nodes[req.Node] = nodePermit{pool: req.NodePool, holder: req.Device.String(), until: sent.Add(req.Hold)}
	held := 0
	for _, p := range m.nodes {
		if p.pool == req.NodePool {
			held++
		}
	}
	if held > m.cfg.Reboots() {
		m.violate("%d nodes of pool %s hold a node permit at once, over the budget of %d", held, req.NodePool, m.cfg.Reboots())
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *breakerModel) expireNodes(now time.Time) {
	for n, p := range m.nodes {
		if !now.Before(p.until) {
			delete(m.nodes, n)
		}
	}
}

// simWorker is a worker process holding leased permits: dead ones spend and answer nothing, cut
// ones spend but cannot be reached to give them back.
type simWorker struct {
	leases    []*simLease
	dead, cut bool
}

type simLease struct {
	l     breaker.Lease
	left  int
	spent []breaker.Grant
}

// spend takes a permit from one of worker w's leases as the worker package does: only while
// the lease runs, a second before its end.
func (m *breakerModel) spend(w int, now time.Time) string {
	wk := &m.workers[w]
	if wk.dead {
		return "dead"
	}
	for _, sl := range wk.leases {
		if sl.left == 0 || !now.Before(sl.l.Until.Add(-time.Second)) {
			continue
		}
		if m.paused {
			m.violate("worker %d spent a permit of lease %d after a pause was answered", w, sl.l.ID)
		}
		sl.left--
		m.spends++
		key := fmt.Sprintf("gpu.sim.devicewarden.io/node-1/leased-%d", m.spends)
		sl.spent = append(sl.spent, breaker.Grant{Device: key, Action: sl.l.Action, At: now})
		m.countGrant(budget(sl.l.Action), key+"/"+string(sl.l.Action), now)
		return fmt.Sprintf("spent one of lease %d (%d left)", sl.l.ID, sl.left)
	}
	return "nothing to spend"
}

// reports is what worker w tells the breaker of its leases; a lease that ran out is returned.
func (m *breakerModel) reports(w int, now time.Time, all bool) []breaker.LeaseReport {
	wk := &m.workers[w]
	var out []breaker.LeaseReport
	kept := wk.leases[:0]
	for _, sl := range wk.leases {
		r := breaker.LeaseReport{Worker: fmt.Sprint(w), Lease: sl.l.ID, Spent: sl.spent}
		sl.spent = nil
		if all || !now.Before(sl.l.Until.Add(-time.Second)) {
			r.Returned, sl.left = sl.left, 0
		}
		if len(r.Spent) > 0 || r.Returned > 0 {
			out = append(out, r)
		}
		if sl.left > 0 {
			kept = append(kept, sl)
		}
	}
	wk.leases = kept
	return out
}

// revoke answers the breaker's revocation on a worker's queue; it runs on the activity's goroutine.
func (m *breakerModel) revoke(queue string, in remediation.RevokeInput, now time.Time) ([]breaker.LeaseReport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var w int
	if _, err := fmt.Sscanf(queue, "q%d", &w); err != nil || w < 0 || w >= len(m.workers) {
		return nil, fmt.Errorf("no worker polls %q", queue)
	}
	// No note here: the trace belongs to the test's goroutine, and the breaker's log says what
	// it revoked and what it could not reach.
	if m.workers[w].dead || m.workers[w].cut {
		return nil, fmt.Errorf("worker %d not reached", w)
	}
	return m.reports(w, now, true), nil
}

type breakerGrant struct {
	at  time.Time
	key string
}

// budget is the budget an action draws on: restrictions have their own.
func budget(a decide.State) string {
	if a == decide.Restricted {
		return "restrictions"
	}
	return "actions"
}

// granted takes a grant the breaker gave at now: a device (and action) already granted within the
// window is not a new grant.
func (m *breakerModel) granted(req breaker.PermitRequest, sent, now time.Time) {
	b := budget(req.Action)
	key := req.Key() + "/" + string(req.Action)
	if !m.pausedAt.IsZero() && sent.After(m.pausedAt) {
		m.violate("%s granted while the breaker was paused by hand", key) // a repeat of a grant too
	}
	m.countGrant(b, key, now)
}

// countGrant counts a new grant (or spent permit) of a budget and checks the cap.
func (m *breakerModel) countGrant(b, key string, now time.Time) {
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

// workerStep is one step of a worker process: ask for a lease (with a permit), spend one in
// process, report what it spent and returned, die, or be cut off from the breaker.
func (m *breakerModel) workerStep(rt *rapid.T, kind string, i, devices int) (string, func(*testsuite.TestWorkflowEnvironment)) {
	w := rapid.IntRange(0, len(m.workers)-1).Draw(rt, fmt.Sprintf("worker%d", i))
	switch kind {
	case "lease":
		d := rapid.IntRange(0, devices-1).Draw(rt, fmt.Sprintf("device%d", i))
		action := rapid.SampledFrom([]decide.State{decide.Quarantined, decide.Restricted}).Draw(rt, fmt.Sprintf("action%d", i))
		req := breaker.LeaseRequest{PermitRequest: breaker.PermitRequest{Device: device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: fmt.Sprintf("gpu-%d", d)},
			Action: action, Config: m.cfg}, Worker: fmt.Sprint(w), Queue: fmt.Sprintf("q%d", w), Want: breaker.LeaseBatch}
		what := fmt.Sprintf("worker %d leases %s for gpu-%d", w, action, d)
		return what, func(env *testsuite.TestWorkflowEnvironment) {
			if m.workers[w].dead {
				return
			}
			sent := env.Now()
			u := &simUpdate{what: what}
			m.updates = append(m.updates, u)
			sendUpdate(env, api.UpdateLease, req, u, nil, func(v any, _ error) {
				r, _ := v.(breaker.LeaseResult)
				m.note("  %s: granted %v %s, lease %+v", what, r.Granted, r.Reason, r.Lease)
				if r.Granted {
					m.granted(req.PermitRequest, sent, env.Now())
				}
				m.mu.Lock()
				if r.Lease != nil && !m.workers[w].dead {
					m.workers[w].leases = append(m.workers[w].leases, &simLease{l: *r.Lease, left: r.Lease.Count})
				}
				m.mu.Unlock()
			})
		}
	case "spend":
		return fmt.Sprintf("worker %d spends", w), func(env *testsuite.TestWorkflowEnvironment) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.note("  %s", m.spend(w, env.Now()))
		}
	case "report":
		return fmt.Sprintf("worker %d reports", w), func(env *testsuite.TestWorkflowEnvironment) {
			m.mu.Lock()
			var reps []breaker.LeaseReport
			if !m.workers[w].dead {
				reps = m.reports(w, env.Now(), false)
			}
			m.mu.Unlock()
			if len(reps) > 0 {
				m.signal(env, api.SignalPermitsReport, reps)
			}
		}
	case "kill":
		return fmt.Sprintf("worker %d dies", w), func(*testsuite.TestWorkflowEnvironment) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.workers[w].dead = true
		}
	default:
		return fmt.Sprintf("worker %d cut off (or back)", w), func(*testsuite.TestWorkflowEnvironment) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.workers[w].cut = !m.workers[w].cut
		}
	}
}

// acquire is a step that asks the breaker for req's permit; a grant goes to granted with when the
// request was sent and when it was answered.
func (m *breakerModel) acquire(what string, req breaker.PermitRequest, granted func(breaker.PermitRequest, time.Time, time.Time)) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		sent := env.Now()
		u := &simUpdate{what: what}
		m.updates = append(m.updates, u)
		sendUpdate(env, api.UpdateAcquire, req, u, nil, func(v any, _ error) {
			r, _ := v.(breaker.PermitResult)
			m.note("  %s: granted %v %s", what, r.Granted, r.Reason)
			if r.Granted {
				granted(req, sent, env.Now())
			}
		})
	}
}

func breakerSteps(rt *rapid.T, m *breakerModel, leasing bool) []step {
	n := rapid.IntRange(1, 60).Draw(rt, "steps")
	devices := rapid.IntRange(1, 12).Draw(rt, "devices")
	var steps []step
	tl := &timeline{at: time.Second}
	for i := range n {
		gaps := []time.Duration{0, 0, time.Second, time.Minute, 4 * time.Minute, 11 * time.Minute}
		if leasing { // leases run for seconds: most steps come within one
			gaps = []time.Duration{0, 0, 0, time.Second, time.Second, 5 * time.Second, time.Minute, 11 * time.Minute}
		}
		gap := rapid.SampledFrom(gaps).Draw(rt, fmt.Sprintf("gap%d", i))
		s := step{at: tl.next(gap)}
		kinds := []string{"acquire", "acquire", "acquire", "acquire", "pause", "resume", "wait", "continue-as-new", "reboot", "reboot", "release",
			"reset", "reset", "reset-ends", "reset-ends"}
		if leasing {
			kinds = append(kinds, "lease", "lease", "lease", "spend", "spend", "spend", "spend", "report", "kill", "cut", "pause-update")
		}
		switch kind := rapid.SampledFrom(kinds).Draw(rt, fmt.Sprintf("kind%d", i)); kind {
		case "reset", "reset-ends":
			at := s.at
			s = m.resetStep(rt, kind, i, devices, tl)
			if s.at == 0 {
				s.at = at
			}
		case "lease", "spend", "report", "kill", "cut":
			s.what, s.do = m.workerStep(rt, kind, i, devices)
		case "pause-update":
			s.what = "pause (update)"
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				if m.pausedAt.IsZero() {
					m.pausedAt = env.Now()
				}
				u := &simUpdate{what: s.what}
				m.updates = append(m.updates, u)
				sendUpdate(env, api.UpdateBreakerPause, api.BreakerSignal{Actor: simActor, Reason: "simulated"}, u, nil, func(v any, err error) {
					if err == nil && !m.pausedAt.IsZero() {
						m.paused = true
					}
					m.note("  pause answered at %s", env.Now().Format("15:04:05"))
				})
			}
		case "acquire":
			d := rapid.IntRange(0, devices-1).Draw(rt, fmt.Sprintf("device%d", i))
			action := rapid.SampledFrom([]decide.State{decide.Quarantined, decide.Restricted, migrationplan.ActionMigrate}).Draw(rt, fmt.Sprintf("action%d", i))
			valid := rapid.IntRange(0, 9).Draw(rt, fmt.Sprintf("valid%d", i)) > 0
			req := breaker.PermitRequest{Device: device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: fmt.Sprintf("gpu-%d", d)},
				Action: action, Config: m.cfg}
			if !valid {
				req.Device = device.ID{}
			}
			s.what = fmt.Sprintf("acquire %s for gpu-%d (valid %v)", action, d, valid)
			s.do = m.acquire(s.what, req, m.granted)
		case "reboot":
			n := simNodes[rapid.IntRange(0, len(simNodes)-1).Draw(rt, fmt.Sprintf("node%d", i))]
			d := rapid.IntRange(0, 1).Draw(rt, fmt.Sprintf("device%d", i))
			req := breaker.PermitRequest{Device: device.ID{Driver: "gpu.sim.devicewarden.io", Pool: n.name, Device: fmt.Sprintf("gpu-%d", d)},
				Action: breaker.Reboot, Node: n.name, NodePool: n.pool, Hold: nodeHold, Config: m.cfg}
			s.what = fmt.Sprintf("node step of %s (pool %s) for gpu-%d", n.name, n.pool, d)
			s.do = m.acquire(s.what, req, m.nodeGranted)
		case "release":
			n := simNodes[rapid.IntRange(0, len(simNodes)-1).Draw(rt, fmt.Sprintf("node%d", i))]
			d := rapid.IntRange(0, 1).Draw(rt, fmt.Sprintf("device%d", i))
			holder := device.ID{Driver: "gpu.sim.devicewarden.io", Pool: n.name, Device: fmt.Sprintf("gpu-%d", d)}.String()
			s.at = tl.own() // the model must know whether the request before it was granted
			s.what = fmt.Sprintf("gpu-%d of %s gives the node permit back", d, n.name)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				if p, ok := m.nodes[n.name]; ok && p.holder == holder {
					delete(m.nodes, n.name)
				}
				m.signal(env, api.SignalPermitRelease, breaker.PermitRelease{Key: "node:" + n.name, Holder: holder})
			}
		case "pause":
			s.what = "pause"
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				if m.pausedAt.IsZero() {
					m.pausedAt = env.Now()
				}
				m.signal(env, api.SignalBreakerPause, api.BreakerSignal{Actor: simActor, Reason: "simulated"})
			}
		case "resume":
			// A resume gets an instant of its own: requests answered in the same instant may have
			// been decided before or after it, and the model could not tell which window they are in.
			s.at = tl.own()
			s.what = "resume"
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				m.pausedAt, m.paused = time.Time{}, false
				m.grants = map[string][]breakerGrant{}
				m.failures = nil
				m.signal(env, api.SignalBreakerResume, api.BreakerSignal{Actor: simActor})
			}
		case "wait":
			d := rapid.IntRange(0, devices-1).Draw(rt, fmt.Sprintf("waiter%d", i))
			s.what = fmt.Sprintf("wait gpu-%d", d)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				m.signal(env, api.SignalBreakerWait, []string{fmt.Sprintf("gpu.sim.devicewarden.io/node-1/gpu-%d", d)})
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
//
// With leases, three worker processes also lease permits ahead, spend them in process, report,
// die holding them or are cut off from the breaker; spent permits count against the cap like
// grants, and once a pause is answered no worker spends a leased permit until a resume.
func TestSimulateBreakerWorkflow(t *testing.T) { simulate(t, 300, breakerProperty) }

func breakerProperty(rt *rapid.T) {
	m := &breakerModel{grants: map[string][]breakerGrant{}, nodes: map[string]nodePermit{}, resets: map[string]time.Time{},
		cfg: breaker.Config{Window: 10 * time.Minute, MaxCount: rapid.IntRange(1, 5).Draw(rt, "cap"), MaxReboots: rapid.IntRange(1, 2).Draw(rt, "reboots"),
			MaxResets: rapid.IntRange(1, 3).Draw(rt, "resets"), MaxResetFailures: rapid.IntRange(1, 3).Draw(rt, "resetFailures")}}
	steps := breakerSteps(rt, m, rapid.IntRange(0, 3).Draw(rt, "leasing") > 0)
	newEnv := quietEnv(func(env *testsuite.TestWorkflowEnvironment) {
		registerActivities(env)
		env.OnActivity("Alert", mock.Anything, mock.Anything).Return(func(context.Context, notify.AlertInput) error { return nil }).Maybe()
		env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalBreakerWake, mock.Anything).Return(nil).Maybe()
		env.OnActivity("RevokePermits", mock.Anything, mock.Anything).Return(func(ctx context.Context, in remediation.RevokeInput) ([]breaker.LeaseReport, error) {
			return m.revoke(activity.GetInfo(ctx).TaskQueue, in, env.Now())
		}).Maybe()
	})
	check := func(env *testsuite.TestWorkflowEnvironment, after string) {
		m.stepped(env, after)
		var st breaker.State
		if m.look(env, after, &st) {
			m.note("  state: open %v (%s), grants %v, resumed %s", st.Open, st.Reason, st.Grants, st.ResumedAt.Format("15:04:05"))
		}
	}
	end := steps[len(steps)-1].at + time.Minute
	if err := segments(rt, &m.carrier, BreakerWorkflow, api.BreakerInput{}, false, end, steps, newEnv, check); err != nil {
		m.violate("the workflow failed: %v", err)
	}
	// An activity the environment still retries after the run ended may touch the model: the end
	// is judged under its lock.
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checkAnswered(m.updates)
	m.checkRefusals(m.updates)
	m.fail(rt)
}
