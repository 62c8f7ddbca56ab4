package workflows

import (
	"errors"
	"flag"
	"fmt"
	"github.com/devicewarden/devicewarden/api"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"pgregory.net/rapid"
)

// The simulations generate random sequences of what a workflow can see (inputs, commands,
// activity outcomes, time passing, continue-as-new) and check invariants after every step. A
// failure prints the shrunk sequence and the seed: rerun it with
//
//	go test -run TestSimulate<Workflow> ./workflows/ -rapid.seed=<seed>
//
// `make simulate N=... SEED=...` runs many more. The number of sequences per workflow in `make
// test` is simChecks (DEVICEWARDEN_SIM_CHECKS overrides it, and -rapid.checks when given).

// simChecks is how many sequences a simulation runs: def, unless DEVICEWARDEN_SIM_CHECKS says.
func simChecks(def int) int {
	if n, err := strconv.Atoi(os.Getenv("DEVICEWARDEN_SIM_CHECKS")); err == nil && n > 0 {
		return n
	}
	return def
}

// simulate runs prop over simChecks(def) generated sequences; -rapid.checks, when given on the
// command line, wins.
func simulate(t *testing.T, def int, prop func(*rapid.T)) {
	t.Helper()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if !given {
		f := flag.Lookup("rapid.checks")
		old := f.Value.String()
		if err := f.Value.Set(strconv.Itoa(simChecks(def))); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Value.Set(old) }()
	}
	start := time.Now()
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		prop(rt)
	})
	if d := time.Since(start); runs > 0 {
		t.Logf("%d sequences in %s: %.0f a second", runs, d.Round(time.Millisecond), float64(runs)/d.Seconds())
	}
}

// step is one generated input at an offset from the sequence's start.
type step struct {
	at   time.Duration
	what string
	do   func(env *testsuite.TestWorkflowEnvironment)
}

// timeline hands the steps their times: the drawn gaps, and an instant of its own (a second
// before it and a second after it) to a step whose order against others in one instant the model
// could not tell.
type timeline struct {
	at    time.Duration
	alone bool
}

// next moves on by gap and returns the step's time.
func (tl *timeline) next(gap time.Duration) time.Duration {
	if tl.alone {
		tl.at, tl.alone = tl.at+time.Second, false
	}
	tl.at += gap
	return tl.at
}

// own gives the current step an instant of its own and returns it.
func (tl *timeline) own() time.Duration {
	tl.at += time.Second
	tl.alone = true
	return tl.at
}

// continueAsNewStep suggests continue-as-new, at an instant of its own: the test environment may
// end the run before a signal sent in the same instant reaches it, which the server refuses (the
// task is retried with the signal).
func continueAsNewStep(tl *timeline) step {
	return step{at: tl.own(), what: "continue-as-new suggested",
		do: func(env *testsuite.TestWorkflowEnvironment) { env.SetContinueAsNewSuggested(true) }}
}

// carrier remembers the signals sent in each instant. The test environment ends a run that
// continues as new without the signals sent in that instant after it decided (and reports the
// run as still going until the instant is over), while the server refuses a continue-as-new with
// signals waiting and retries the task with them. So the signals of a run's last instant are sent
// again to the next run; those the last run did take arrive twice, which every signal must bear
// (senders retry).
type carrier struct {
	sent []sentSignal
	// ended, when set, is called with the environment of a run that ended other than by
	// continuing as new: its result is there to read.
	ended func(*testsuite.TestWorkflowEnvironment)
}

type sentSignal struct {
	at   time.Time
	send func(*testsuite.TestWorkflowEnvironment)
}

// signal sends a signal and remembers it.
func (c *carrier) signal(env *testsuite.TestWorkflowEnvironment, name string, arg any) {
	send := func(env *testsuite.TestWorkflowEnvironment) { env.SignalWorkflow(name, arg) }
	c.sent = append(c.sent, sentSignal{at: env.Now(), send: send})
	send(env)
}

// lastInstant returns the signals sent at the instant a run ended, and forgets the rest.
func (c *carrier) lastInstant(end time.Time) []func(*testsuite.TestWorkflowEnvironment) {
	var out []func(*testsuite.TestWorkflowEnvironment)
	for _, s := range c.sent {
		if s.at.Equal(end) {
			out = append(out, s.send)
		}
	}
	c.sent = nil
	return out
}

// segments runs steps against a workflow that may continue as new: each run gets a fresh test
// environment (newEnv) and the steps not yet delivered, shifted to its start. A run that ends
// before the sequence does is started again from first when restart is set (a device workflow
// that ended idle: the watcher's next report starts another). check runs after every delivered
// step. It returns the error a run failed with, or nil.
func segments[In any](rt *rapid.T, c *carrier, fn any, first In, restart bool, end time.Duration, steps []step,
	newEnv func() *testsuite.TestWorkflowEnvironment, check func(env *testsuite.TestWorkflowEnvironment, after string)) error {
	in := first
	var offset time.Duration
	var resend []func(*testsuite.TestWorkflowEnvironment)
	// Ahead of the wall clock: the test environment bounds a local activity by the earlier of a
	// deadline from the wall clock and one from the workflow's clock; a workflow clock behind the
	// wall clock expires every local activity as it starts, and whether its result or the timeout
	// wins then depends on the machine's load (and on the time of day).
	t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	next := 0
	stuck := 0
	for {
		if stuck++; stuck > 50 {
			rt.Fatalf("50 runs in a row took no step (at %s, step %d of %d)", offset, next, len(steps))
		}
		env := newEnv()
		env.SetStartTime(t0.Add(offset))
		before := next
		if len(resend) > 0 {
			again := resend
			resend = nil
			env.RegisterDelayedCallback(func() {
				for _, send := range again {
					send(env)
				}
			}, 0)
		}
		for i := next; i < len(steps); i++ {
			s, i := steps[i], i
			env.RegisterDelayedCallback(func() {
				if env.IsWorkflowCompleted() || next > i {
					return // for the next run
				}
				next = i + 1
				s.do(env)
				check(env, s.what)
			}, max(0, s.at-offset))
		}
		ended := false
		env.RegisterDelayedCallback(func() { ended = true; env.CancelWorkflow() }, end-offset)
		env.ExecuteWorkflow(fn, in)
		err := env.GetWorkflowError()
		stopWallTimers(env)
		var can *workflow.ContinueAsNewError
		if c.ended != nil && !errors.As(err, &can) {
			c.ended(env)
		}
		switch {
		case errors.As(err, &can):
			resend = c.lastInstant(env.Now())
			var next In // a fresh value: decoding into the last input would keep fields the next one omits
			if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
				rt.Fatalf("continue-as-new input: %v", err)
			}
			in = next
		case err != nil && !temporal.IsCanceledError(err) && !(ended && temporal.IsTimeoutError(err)):
			// (A workflow that waits only on signals, like the limiter, ignores the cancellation at
			// the sequence's end; the test environment then times it out.)
			return err
		case err == nil && restart && next < len(steps):
			in = first
		default:
			return nil
		}
		offset = env.Now().Sub(t0)
		if next > before {
			stuck = 0
		}
		if offset >= end {
			return nil
		}
	}
}

// stopWallTimers stops the real timers a test environment left behind. The SDK's environment
// backs a workflow timer that is pending while an activity runs with a real time.AfterFunc of
// the timer's whole duration, and does not stop it when the run ends (as by continue-as-new): the
// runtime keeps it, and through it the whole environment, until it fires, hours or years on.
// Without this, 100,000 claim-hygiene sequences held 18 GB after three minutes.
func stopWallTimers(env *testsuite.TestWorkflowEnvironment) {
	timers := reflect.ValueOf(env).Elem().FieldByName("impl").Elem().FieldByName("timers")
	for _, k := range timers.MapKeys() {
		wt := timers.MapIndex(k).Elem().FieldByName("wallTimer")
		if wt.IsNil() {
			continue
		}
		usable := reflect.NewAt(wt.Type(), unsafe.Pointer(wt.UnsafeAddr())).Elem() // unexported: reach it as a pointer
		usable.MethodByName("Stop").Call(nil)
	}
}

// query reads the workflow's state; ok is false before the run's first task registered its query
// handler (the test environment panics on a query then).
func query(env *testsuite.TestWorkflowEnvironment, into any) (ok bool, err error) {
	defer func() {
		if recover() != nil {
			ok, err = false, nil
		}
	}()
	v, err := env.QueryWorkflow(api.QueryState)
	if err != nil {
		return true, err
	}
	return true, v.Get(into)
}

// simRegressions are the sequences a simulation once failed on (rapid's fail files, kept in
// testdata/sim as <workflow>_<what>.fail), each replayed by TestSimulateRegressions.
var simRegressions = map[string]func(*rapid.T){"device": deviceProperty, "unit": unitProperty, "breaker": breakerProperty, "migrate": migrateProperty,
	"limiter": limiterProperty, "rollout": rolloutProperty, "hygiene": hygieneProperty, "node": nodeProperty}

// TestSimulateRegressions replays every sequence a simulation failed on, by name.
func TestSimulateRegressions(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "sim", "*.fail"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no regression sequences in testdata/sim: %v", err)
	}
	// Only the recorded sequence: rapid goes on to draw rapid.checks new ones after a fail file
	// passes, which is the simulations' own work, not this test's.
	f, checks := flag.Lookup("rapid.failfile"), flag.Lookup("rapid.checks")
	oldFile, oldChecks := f.Value.String(), checks.Value.String()
	defer func() { _, _ = f.Value.Set(oldFile), checks.Value.Set(oldChecks) }()
	if err := checks.Value.Set("0"); err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if err := readableFailFile(file); err != nil {
			t.Fatal(err) // rapid ignores a file it cannot read, and the sequence would pass unseen
		}
		name := strings.TrimSuffix(filepath.Base(file), ".fail")
		prop := simRegressions[strings.SplitN(name, "_", 2)[0]]
		if prop == nil {
			t.Fatalf("%s: no simulation named by its prefix", file)
		}
		t.Run(name, func(t *testing.T) {
			if err := f.Value.Set(file); err != nil {
				t.Fatal(err)
			}
			// rapid passes a sequence whose draws no longer fit the simulation (a draw added
			// since it was recorded): one that did not run to its end replays nothing.
			ended := false
			rapid.Check(t, func(rt *rapid.T) {
				prop(rt)
				ended = true
			})
			if !t.Failed() && !ended {
				t.Fatalf("%s no longer replays: the simulation draws differently since it was recorded; record the defect's sequence again, or delete the file if a test of its own holds the defect", file)
			}
		})
	}
}

// failFileVersion is the format rapid writes its fail files in (their first line that is not a
// comment: "<version>#<seed>"), and reads only in.
const failFileVersion = "v0.4.8#"

// readableFailFile says why rapid would ignore a fail file, if it would.
func readableFailFile(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.HasPrefix(line, failFileVersion) {
			return fmt.Errorf("%s: rapid would ignore it: its format line %q is not %s<seed>", file, line, failFileVersion)
		}
		return nil
	}
	return fmt.Errorf("%s: rapid would ignore it: no sequence in it", file)
}

// simLog is what one sequence saw: its trace (steps, activity calls and violations, in order)
// and the invariants it broke. Every model embeds one.
type simLog struct {
	violations, trace []string
}

// violate records a broken invariant, in the trace too.
func (l *simLog) violate(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	l.violations = append(l.violations, v)
	l.note("VIOLATION: %s", v)
}

// note adds a line to the trace.
func (l *simLog) note(format string, args ...any) {
	l.trace = append(l.trace, fmt.Sprintf(format, args...))
}

// stepped notes a step as it was delivered.
func (l *simLog) stepped(env *testsuite.TestWorkflowEnvironment, after string) {
	l.note("%s: %s", env.Now().Format("15:04:05"), after)
}

// look reads the workflow's state after a step into into; false when there is none to hold (the
// run ended, or its first task has not registered the query) or the query failed, which is a
// violation: every query answers.
func (l *simLog) look(env *testsuite.TestWorkflowEnvironment, after string, into any) bool {
	if env.IsWorkflowCompleted() {
		return false
	}
	ok, err := query(env, into)
	if err != nil {
		l.violate("after %s: the state query failed: %v", after, err)
	}
	return ok && err == nil
}

// fail fails the sequence when an invariant broke, with the first and the whole trace.
func (l *simLog) fail(rt *rapid.T) {
	if len(l.violations) > 0 {
		rt.Fatalf("%d violation(s), first: %s\n%s", len(l.violations), l.violations[0], strings.Join(l.trace, "\n"))
	}
}

// quietEnv makes test environments that log nothing (a simulation runs thousands), each with its
// activities (and mocks) set up by register.
func quietEnv(register func(*testsuite.TestWorkflowEnvironment)) func() *testsuite.TestWorkflowEnvironment {
	return func() *testsuite.TestWorkflowEnvironment {
		var s testsuite.WorkflowTestSuite
		s.SetLogger(quietLogger{})
		env := s.NewTestWorkflowEnvironment()
		register(env)
		return env
	}
}

// simUpdate is a sent update and how it was answered.
type simUpdate struct {
	what                string
	done, accepted      bool
	rejected, completed error
}

// sendUpdate sends an update and records in u how it is answered; onAccept and onComplete, when
// set, run then too.
func sendUpdate(env *testsuite.TestWorkflowEnvironment, name string, arg any, u *simUpdate, onAccept func(), onComplete func(any, error)) {
	env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
		OnReject: func(err error) { u.done, u.rejected = true, err },
		OnAccept: func() {
			u.accepted = true
			if onAccept != nil {
				onAccept()
			}
		},
		OnComplete: func(res any, err error) {
			u.done, u.completed = true, err
			if onComplete != nil {
				onComplete(res, err)
			}
		},
	}, arg)
}

// checkRefusals holds every refused update to saying why.
func (l *simLog) checkRefusals(us []*simUpdate) {
	for _, u := range us {
		if u.rejected != nil && u.rejected.Error() == "" {
			l.violate("%s refused without a reason", u.what)
		}
	}
}

// checkAnswered holds every accepted update to an answer. (One neither accepted nor refused when
// its run ended failed at the caller, who sends it again.)
func (l *simLog) checkAnswered(us []*simUpdate) {
	for _, u := range us {
		if u.accepted && !u.done {
			l.violate("%s accepted but never answered", u.what)
		}
	}
}

// quietLogger drops the test environment's logs: a simulation runs thousands of workflows.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
