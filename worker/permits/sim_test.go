package permits

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// TestSimulatePermits drives the breaker's real state (breaker.State) and three workers'
// real permit caches (Client) through generated sequences of the seam between them:
// devices asking, lease answers the breaker computed but a worker has not yet received, pauses
// whose revocations race those answers, resumes, reports lost or sent twice, workers that die
// holding batches, and time passing windows. It checks, after every step:
//   - no worker grants anything from its batch or its memory after a pause has answered, and
//     until a resume (an answer the breaker gave before the pause may still arrive after it);
//   - the new actions granted in any window never exceed the cap;
//   - a repeat is granted only for an action that was granted in the window;
//   - every grant the breaker records is an action that was taken, under its own action.
//
// make simulate runs it longer (SIM_WORKFLOWS=Permits).
func TestSimulatePermits(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { newPermitSim().run(rt) })
}

const (
	simCap     = 6
	simWorkers = 3
	simDevices = 8
)

var simConfig = breaker.Config{Window: 10 * time.Minute, MaxCount: simCap}

// flight is a lease request a worker sent; answer is set once the breaker took it.
type flight struct {
	worker int
	req    breaker.PermitRequest
	sent   time.Time
	answer *breaker.LeaseResult
	at     time.Time // when the breaker answered
	epoch  int
}

// taken is one action the model saw granted: a device acting, decided at at, after the epoch-th
// resume (a resume starts a fresh window).
type taken struct {
	key   string // device|action
	at    time.Time
	epoch int
}

type permitSim struct {
	now     time.Time
	breaker *breaker.State
	workers []*Client
	dead    []bool
	flights []*flight
	// paused: a pause was sent; answeredAt: when it answered (zero until it does).
	paused     bool
	answeredAt time.Time
	epoch      int // resumes so far
	taken      []taken
	// answered: the device|action keys the breaker granted in a lease answer, which counts them
	// whether or not the answer reaches a device.
	answered map[string]time.Time
}

func newPermitSim() *permitSim {
	s := &permitSim{now: time.Now(), dead: make([]bool, simWorkers), answered: map[string]time.Time{},
		breaker: &breaker.State{Config: simConfig, SeparateBudgets: true, WakeWaiting: true, OpenDeniesAll: true, SpendsOwnAction: true}}
	for i := range simWorkers {
		// flushing keeps the reporter goroutine off: the model delivers reports itself.
		s.workers = append(s.workers, &Client{Worker: fmt.Sprint("w", i), Queue: fmt.Sprint("q", i), flushing: true})
	}
	return s
}

func (s *permitSim) run(rt *rapid.T) {
	steps := rapid.IntRange(1, 80).Draw(rt, "steps")
	for range steps {
		switch rapid.IntRange(0, 9).Draw(rt, "step") {
		case 0, 1, 2:
			s.ask(rt)
		case 3:
			s.breakerTakes(rt)
		case 4:
			s.deliver(rt)
		case 5:
			s.flush(rt)
		case 6:
			s.pause()
		case 7:
			if rapid.Bool().Draw(rt, "resume") {
				s.resume()
			} else {
				s.kill(rapid.IntRange(0, simWorkers-1).Draw(rt, "killed"))
			}
		default:
			s.now = s.now.Add(time.Duration(rapid.IntRange(1, 700).Draw(rt, "seconds")) * time.Second)
		}
		s.check(rt)
	}
}

// ask: a device of a live worker asks for an action; the worker answers from its batch or its
// memory, else sends one lease request per budget (the others wait for it in the real client).
func (s *permitSim) ask(rt *rapid.T) {
	w := rapid.IntRange(0, simWorkers-1).Draw(rt, "worker")
	if s.dead[w] {
		return
	}
	action := rapid.SampledFrom([]decide.State{decide.Quarantined, migrationplan.ActionMigrate}).Draw(rt, "action")
	req := breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", rapid.IntRange(0, simDevices-1).Draw(rt, "device"))},
		Action: action, Config: simConfig, KnownDevices: 1000}
	b := s.workers[w]
	b.mu.Lock()
	res, ok := b.takeLeased(req, s.now)
	if !ok {
		b.retireBatch(breaker.BudgetOf(action))
	}
	b.mu.Unlock()
	if ok {
		s.granted(rt, w, req, res, s.now, s.epoch, true)
		return
	}
	for _, f := range s.flights {
		if f.worker == w {
			return // one request in flight per worker
		}
	}
	s.flights = append(s.flights, &flight{worker: w, req: req, sent: s.now})
}

// breakerTakes: the breaker answers a request in flight (the answer is not yet delivered).
func (s *permitSim) breakerTakes(rt *rapid.T) {
	var waiting []*flight
	for _, f := range s.flights {
		if f.answer == nil {
			waiting = append(waiting, f)
		}
	}
	if len(waiting) == 0 {
		return
	}
	f := waiting[rapid.IntRange(0, len(waiting)-1).Draw(rt, "request")]
	b := s.workers[f.worker]
	res := s.breaker.Lease(breaker.LeaseRequest{PermitRequest: f.req, Worker: b.Worker, Queue: b.Queue, Want: breaker.LeaseBatch}, s.now)
	if res.Granted {
		if _, ok := s.answered[f.req.Key()+"|"+string(f.req.Action)]; !ok || res.Reason == "" {
			s.answered[f.req.Key()+"|"+string(f.req.Action)] = s.now
		}
	}
	f.answer, f.at, f.epoch = &res, s.now, s.epoch
}

// deliver: an answer reaches its worker.
func (s *permitSim) deliver(rt *rapid.T) {
	var ready []int
	for i, f := range s.flights {
		if f.answer != nil {
			ready = append(ready, i)
		}
	}
	if len(ready) == 0 {
		return
	}
	i := ready[rapid.IntRange(0, len(ready)-1).Draw(rt, "answer")]
	f := s.flights[i]
	s.flights = append(s.flights[:i], s.flights[i+1:]...)
	if s.dead[f.worker] {
		return
	}
	b := s.workers[f.worker]
	b.mu.Lock()
	res := b.install(breaker.BudgetOf(f.req.Action), f.req, *f.answer, f.sent)
	b.mu.Unlock()
	if res.Granted {
		s.granted(rt, f.worker, f.req, res, f.at, f.epoch, false)
	}
}

// flush: a worker reports what it spent and returned; the signal lands, fails, or lands and
// answers an error (the worker sends it again).
func (s *permitSim) flush(rt *rapid.T) {
	w := rapid.IntRange(0, simWorkers-1).Draw(rt, "worker")
	if s.dead[w] {
		return
	}
	b := s.workers[w]
	b.mu.Lock()
	reps := b.reports(s.now)
	b.mu.Unlock()
	if len(reps) == 0 {
		return
	}
	mode := rapid.IntRange(0, 2).Draw(rt, "delivery") // 0 lands, 1 fails, 2 lands but answers an error
	if mode != 1 {
		for _, r := range reps {
			s.breaker.Report(r, s.now)
		}
	}
	if mode != 0 {
		b.mu.Lock()
		b.returned = append(reps, b.returned...)
		b.mu.Unlock()
	}
}

// pause opens the breaker by hand as the breaker workflow does: every lease a worker may still
// spend is revoked on its queue; a dead worker's are waited out before the pause answers.
func (s *permitSim) pause() {
	s.breaker.Trip("operator", "sim", s.now)
	queues, ids := s.breaker.Outstanding(s.now)
	for _, q := range queues {
		w := s.queueWorker(q)
		if s.dead[w] {
			s.breaker.Unreachable(ids[q])
			continue
		}
		for _, r := range s.workers[w].Revoke(ids[q]) {
			s.breaker.Report(r, s.now)
		}
	}
	if !s.paused {
		s.paused = true
		s.answeredAt = s.now
		if until := s.breaker.SpendableUntil(s.now); !until.IsZero() {
			s.answeredAt = until
		}
	}
}

func (s *permitSim) resume() {
	s.breaker.Resume("operator", s.now)
	s.paused, s.answeredAt = false, time.Time{}
	s.epoch++
}

func (s *permitSim) kill(w int) {
	s.dead[w] = true
}

func (s *permitSim) queueWorker(q string) int {
	for i, b := range s.workers {
		if b.Queue == q {
			return i
		}
	}
	panic("no worker for queue " + q)
}

// granted checks one answer that lets a device act, and records it; decided is when it was
// answered, and local says the worker answered from its batch or memory, not the breaker.
func (s *permitSim) granted(rt *rapid.T, w int, req breaker.PermitRequest, res breaker.PermitResult, decided time.Time, epoch int, local bool) {
	key := req.Key() + "|" + string(req.Action)
	if local && s.paused && !s.now.Before(s.answeredAt) {
		rt.Fatalf("worker %d granted %s (%q) after the pause answered at %s", w, key, res.Reason, s.answeredAt.Format(time.TimeOnly))
	}
	if res.Reason != "" {
		if at, ok := s.answered[key]; ok && decided.Sub(at) < simConfig.Window {
			return
		}
		for _, tk := range s.taken {
			if tk.key == key && decided.Sub(tk.at) < simConfig.Window {
				return
			}
		}
		rt.Fatalf("worker %d granted %s again (%q), but it was never granted in the window", w, key, res.Reason)
	}
	s.taken = append(s.taken, taken{key: key, at: decided, epoch: epoch})
	since := s.now.Add(-simConfig.Window)
	n := 0
	for _, tk := range s.taken {
		if tk.at.After(since) && tk.epoch == s.epoch {
			n++
		}
	}
	if n > simCap {
		rt.Fatalf("%d new actions in the window, over the cap of %d", n, simCap)
	}
}

// check: every grant the breaker records is an action a device took, under its own action, or
// the breaker's own answer to a request.
func (s *permitSim) check(rt *rapid.T) {
	for _, g := range s.breaker.Grants {
		key := g.Device + "|" + string(g.Action)
		_, found := s.answered[key]
		for _, tk := range s.taken {
			if tk.key == key {
				found = true
				break
			}
		}
		if !found {
			rt.Fatalf("the breaker records %s, which no device took and it never answered", key)
		}
	}
}
