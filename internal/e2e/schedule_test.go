//go:build e2e

package e2e

import (
	"cmp"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The harness schedules the tests itself; go test's -parallel says how many run at once. Three
// kinds, each test naming its own with its first call:
//   - inTurn: a test on the shared stack that reads cluster-wide state (every quarantine, the
//     breaker, the fleet page). These run one at a time, in the order go test starts them: the
//     order of the files, and of the tests in each. While any is left, one slot is theirs.
//   - onOwnStack: a test that starts a stack of its own. Nothing it does reaches the shared
//     stack, so it runs beside the in-turn tests from the start: most of them wait on timers.
//   - besideOthers: a shared-stack test that looks only at the nodes, pools and classes it made.
//     It waits until every in-turn test is done (they would count its quarantines), then runs
//     beside the others.
//
// The tests beside the line start longest first, by the lengths a past run measured
// (testdata/lengths.txt), so the run does not end on a long test started late; one not measured
// yet counts as long. The first of them starts once all have come to the harness (go test
// releases them together, once the tests that name none are done).
//
// A test that names none runs before all of them, alone, as go test runs a test without
// t.Parallel.
type scheduler struct {
	mu sync.Mutex
	// turned is broadcast when the line moves on.
	turned *sync.Cond
	slots  int // how many tests run at once; the in-turn line holds one while it has tests left
	// The in-turn line: tickets in registration order; turn is the ticket that may run.
	tickets, turn int
	left          int // in-turn tests registered and not done
	running       int // onOwnStack and besideOthers tests holding a slot
	waiting       []*waiter
	// registered and arrived count the onOwnStack and besideOthers tests that named their kind
	// and those of them that came back from t.Parallel: none is admitted before all came.
	registered, arrived int
	// lengths are the slot times a past run measured, by test name.
	lengths map[string]time.Duration
}

// waiter is a test waiting for a slot; ready is closed when it has one.
type waiter struct {
	beside bool
	length time.Duration
	ready  chan struct{}
}

// unmeasured is the length a test that no past run measured counts as: long, so it starts early.
const unmeasured = 90 * time.Second

var schedule = newScheduler(4)

func newScheduler(slots int) *scheduler {
	s := &scheduler{slots: slots}
	s.turned = sync.NewCond(&s.mu)
	return s
}

// takeParallel reads go test's -parallel as the harness's slots and lifts go test's own limit, so
// a test waiting for its turn holds no slot that the test whose turn it is needs.
func (s *scheduler) takeParallel() error {
	f := flag.Lookup("test.parallel")
	if f == nil {
		return fmt.Errorf("no -test.parallel flag")
	}
	n, err := strconv.Atoi(f.Value.String())
	if err != nil || n < 1 {
		return fmt.Errorf("-parallel %q: want a positive number", f.Value.String())
	}
	s.slots = n
	return flag.Set("test.parallel", "10000")
}

// inTurn makes t wait for its turn in the line of tests that read the shared stack's cluster-wide
// state. It must be t's first call: the ticket is taken before t.Parallel, while go test still
// starts the tests one by one.
func inTurn(t *testing.T) {
	t.Helper()
	s := schedule
	s.mu.Lock()
	ticket := s.tickets
	s.tickets++
	s.left++
	s.mu.Unlock()
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.turn++
		s.left--
		s.turned.Broadcast()
		s.admit()
	})
	t.Parallel()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.turn != ticket {
		s.turned.Wait()
	}
	t.Cleanup(ran.begin(t.Name(), "in turn"))
}

// onOwnStack runs t beside the others as soon as a slot is free.
func onOwnStack(t *testing.T) { schedule.take(t, false) }

// besideOthers runs t beside the others once every in-turn test is done and a slot is free.
func besideOthers(t *testing.T) { schedule.take(t, true) }

func (s *scheduler) take(t *testing.T, beside bool) {
	t.Helper()
	length := s.register(t.Name())
	t.Parallel()
	<-s.arrive(beside, length)
	kind := "own stack"
	if beside {
		kind = "beside others"
	}
	t.Cleanup(ran.begin(t.Name(), kind))
	t.Cleanup(s.done)
}

// register counts a test that will wait for a slot, and says how long it is expected to hold it.
func (s *scheduler) register(name string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registered++
	if length, ok := s.lengths[name]; ok {
		return length
	}
	return unmeasured
}

// arrive puts a registered test in the waiting list; the channel is closed when it has a slot.
func (s *scheduler) arrive(beside bool, length time.Duration) <-chan struct{} {
	w := &waiter{beside: beside, length: length, ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arrived++
	s.waiting = append(s.waiting, w)
	s.admit()
	return w.ready
}

// done gives a slot back.
func (s *scheduler) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	s.admit()
}

// admit gives free slots to the waiting tests that may run, the longest first (those of one
// length in the order they came), once every registered test came. Called with mu held, whenever
// a test starts waiting or ends.
func (s *scheduler) admit() {
	if s.arrived < s.registered {
		return
	}
	free := s.slots - s.running
	if s.left > 0 {
		free-- // the in-turn line's slot
	}
	slices.SortStableFunc(s.waiting, func(a, b *waiter) int { return cmp.Compare(b.length, a.length) })
	kept := s.waiting[:0]
	for _, w := range s.waiting {
		if free > 0 && (!w.beside || s.left == 0) {
			free--
			s.running++
			close(w.ready)
			continue
		}
		kept = append(kept, w)
	}
	s.waiting = kept
}
