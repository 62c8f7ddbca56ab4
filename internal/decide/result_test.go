package decide

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// taintOf is the automatic quarantine a fresh device's Unhealthy report asks for.
func taintOf(t *testing.T, rules Rules) (*DeviceState, Action) {
	t.Helper()
	st := NewState(dev, "node-1", policy.Default(), false)
	st.Follow(rules)
	for _, a := range st.Observe(obs(device.Unhealthy, 1, ""), t0) {
		if a.Kind == ActTaint {
			return st, a
		}
	}
	t.Fatal("no taint asked for")
	return nil, Action{}
}

// Report routes every result of a taint to what it means for the device.
func TestReportOfATaint(t *testing.T) {
	release := Rules{ReleasePath: true, BreakerWake: true}
	for _, c := range []struct {
		name  string
		rules Rules
		res   func(Action) Result
		check func(t *testing.T, st *DeviceState, more []Action)
	}{
		{"done: the record names the rule, and the rule's effect on the release path", release,
			func(a Action) Result { return Result{Action: a, Outcome: Done, Rule: "r1", Effect: "NoExecute"} },
			func(t *testing.T, st *DeviceState, more []Action) {
				if st.State != Quarantined || st.Quarantine == nil || st.Quarantine.RuleName != "r1" || st.Quarantine.Effect != "NoExecute" || len(more) != 0 {
					t.Fatalf("state %s, record %+v, more %v", st.State, st.Quarantine, more)
				}
			}},
		{"done before the release path: the effect asked for stays", Rules{},
			func(a Action) Result { return Result{Action: a, Outcome: Done, Rule: "r1", Effect: "NoExecute"} },
			func(t *testing.T, st *DeviceState, _ []Action) {
				if st.Quarantine == nil || st.Quarantine.Effect == "NoExecute" {
					t.Fatalf("record %+v", st.Quarantine)
				}
			}},
		{"held: retried after BreakerRetry", release,
			func(a Action) Result { return Result{Action: a, Outcome: Held, Reason: "breaker unreachable"} },
			func(t *testing.T, st *DeviceState, _ []Action) {
				if st.State == Quarantined || st.Held == nil || st.HeldReason != "breaker unreachable" || !st.RetryAt.Equal(t0.Add(BreakerRetry)) {
					t.Fatalf("state %s, held %v %q until %s", st.State, st.Held, st.HeldReason, st.RetryAt)
				}
			}},
		{"denied: waits for the breaker's wake, or the fallback", release,
			func(a Action) Result { return Result{Action: a, Outcome: Denied, Reason: "cap"} },
			func(t *testing.T, st *DeviceState, _ []Action) {
				if st.Held == nil || !st.RetryAt.Equal(t0.Add(BreakerFallback)) {
					t.Fatalf("held %v until %s", st.Held, st.RetryAt)
				}
			}},
		{"denied before the breaker woke devices: asks again after BreakerRetry", Rules{ReleasePath: true},
			func(a Action) Result { return Result{Action: a, Outcome: Denied, Reason: "cap"} },
			func(t *testing.T, st *DeviceState, _ []Action) {
				if st.Held == nil || !st.RetryAt.Equal(t0.Add(BreakerRetry)) {
					t.Fatalf("held %v until %s", st.Held, st.RetryAt)
				}
			}},
		{"failed on the release path: held, counted and alerted", release,
			func(a Action) Result { return Result{Action: a, Outcome: Failed, Reason: "forbidden"} },
			func(t *testing.T, st *DeviceState, more []Action) {
				if st.Held == nil || st.TaintFailures != 1 || len(more) != 1 || more[0].Level != LevelCritical || !strings.Contains(more[0].Reason, "forbidden") {
					t.Fatalf("held %v, failures %d, more %+v", st.Held, st.TaintFailures, more)
				}
			}},
		{"failed before the release path: held, nothing more", Rules{},
			func(a Action) Result { return Result{Action: a, Outcome: Failed, Reason: "forbidden"} },
			func(t *testing.T, st *DeviceState, more []Action) {
				if st.Held == nil || st.HeldReason != "taint failed: forbidden" || st.TaintFailures != 0 || len(more) != 0 {
					t.Fatalf("held %v %q, failures %d, more %+v", st.Held, st.HeldReason, st.TaintFailures, more)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, a := taintOf(t, c.rules)
			c.check(t, st, st.Report(c.res(a), t0))
		})
	}
}

// Report routes the results of the other actions: a rule's inspection, refresh and release, a
// check, and the Pods moving.
func TestReportOfTheOtherActions(t *testing.T) {
	refresh := Action{Kind: ActRefreshRule, Key: TaintQuarantine, Reason: "extend"}

	st := quarantined(policy.Default())
	if more := st.Report(Result{Action: Action{Kind: ActInspectRule}, Outcome: Done, Info: RuleInfo{Name: dev.TaintRuleName()}}, t0.Add(time.Minute)); st.State != Released || len(more) == 0 {
		t.Fatalf("an inspection that found no rule: %s, %v", st.State, more)
	}
	st = quarantined(policy.Default())
	if more := st.Report(Result{Action: refresh, Outcome: Missing}, t0.Add(time.Minute)); st.State != Released || len(more) == 0 {
		t.Fatalf("a refresh that found no rule: %s, %v", st.State, more)
	}
	st = quarantined(policy.Default())
	if more := st.Report(Result{Action: refresh, Outcome: Failed, Reason: "conflict"}, t0.Add(time.Minute)); st.State != Quarantined || len(more) != 1 || !strings.Contains(more[0].Reason, "conflict") {
		t.Fatalf("a refresh that failed: %s, %v", st.State, more)
	}
	st = quarantined(policy.Default())
	if more := st.Report(Result{Action: Action{Kind: ActFenceMembers}, Outcome: Done}, t0.Add(time.Minute)); st.State != Quarantined || len(more) != 0 {
		t.Fatalf("a unit's fence extended: %s, %v", st.State, more)
	}
	st = quarantined(policy.Default())
	st.Report(Result{Outcome: Moving, Pods: []PodRef{{Namespace: "ns", Name: "p"}}}, t0)
	if len(st.Moving) != 1 || st.Moving[0].Name != "p" {
		t.Fatalf("moving %+v", st.Moving)
	}

	// A review: the probe's result through Report, then the release's.
	st = quarantined(policy.Default())
	at := t0.Add(24 * time.Hour)
	wantKinds(t, "lease end", st.Tick(at), ActProbe)
	more := st.Report(Result{Action: Action{Kind: ActProbe}, Outcome: Done, Check: StepResult{Passed: false, Reason: "xid", At: at}}, at)
	if st.State != Quarantined || st.LastProbe == nil || st.LastProbe.Passed || len(more) == 0 {
		t.Fatalf("a failed probe: %s, last probe %+v, more %v", st.State, st.LastProbe, more)
	}
	st = quarantined(policy.Default())
	review(t, st)
	if st.State != Recovering {
		t.Fatalf("after the review: %s", st.State)
	}
	if more := st.Report(Result{Action: Action{Kind: ActRelease}, Outcome: Failed, Reason: "forbidden"}, at); st.State == Released || len(more) == 0 {
		t.Fatalf("a release that failed: %s, %v", st.State, more)
	}
	st = quarantined(policy.Default())
	review(t, st)
	if more := st.Report(Result{Action: Action{Kind: ActRelease}, Outcome: Done}, at); st.State != Released || len(more) != 1 {
		t.Fatalf("a release done: %s, %v", st.State, more)
	}
}

// The rules a run follows are not part of the state it carries into its next run.
func TestRulesAreNotCarried(t *testing.T) {
	st := quarantined(policy.Default())
	st.Follow(Rules{ReleasePath: true, BreakerWake: true})
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var next DeviceState
	if err := json.Unmarshal(raw, &next); err != nil {
		t.Fatal(err)
	}
	if (next.Rules() != Rules{}) || strings.Contains(string(raw), "releasePath") {
		t.Fatalf("carried: %+v in %s", next.Rules(), raw)
	}
}

// A quarantine lasts the policy's lease, or on the release path the review interval once a
// failed review has set one; the record and the rule expire together.
func TestLeaseOfAQuarantine(t *testing.T) {
	st, a := taintOf(t, Rules{})
	st.ReviewInterval = policy.JSONDuration(48 * time.Hour)
	if got := fenceOf(st).lease(); got != st.Policy.QuarantineLease.D() {
		t.Fatalf("before the release path: %s, want the policy's %s", got, st.Policy.QuarantineLease.D())
	}
	st.Follow(Rules{ReleasePath: true})
	if got := fenceOf(st).lease(); got != 48*time.Hour {
		t.Fatalf("on the release path: %s, want the review interval", got)
	}
	st.ReviewInterval = 0
	if got := fenceOf(st).lease(); got != st.Policy.QuarantineLease.D() {
		t.Fatalf("no review interval yet: %s", got)
	}
	st.Report(Result{Action: a, Outcome: Done, Rule: "r"}, t0)
	if !st.Quarantine.ExpiresAt.Equal(t0.Add(fenceOf(st).lease())) {
		t.Fatalf("record expires %s, lease %s", st.Quarantine.ExpiresAt, fenceOf(st).lease())
	}
}
