package decide

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func quarantined(p policy.Policy) *DeviceState { return quarantinedBy(p, obs(device.Unhealthy, 1, "")) }

func quarantinedBy(p policy.Policy, o Observation) *DeviceState {
	st := NewState(dev, "node-1", p, false)
	st.rules.ReleasePath = true
	for _, a := range st.Observe(o, t0) {
		if a.Kind == ActTaint {
			fenceOf(st).applied(a, dev.TaintRuleName(), t0)
		}
	}
	return st
}

func obs(hl device.Health, version int, src Source) Observation {
	return Observation{Device: dev, Node: "node-1", Health: hl, StatusVersion: strconv.Itoa(version), ObservedAt: t0, Source: src,
		Reporters: []Reporter{{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: hl}}}
}

func kinds(acts []Action) []ActionKind {
	var out []ActionKind
	for _, a := range acts {
		out = append(out, a.Kind)
	}
	return out
}

func wantKinds(t *testing.T, step string, acts []Action, want ...ActionKind) {
	t.Helper()
	got := kinds(acts)
	if len(got) != len(want) {
		t.Fatalf("%s: actions %v, want %v", step, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: actions %v, want %v", step, got, want)
		}
	}
}

func pass(at time.Time) StepResult { return StepResult{Passed: true, Reason: "exit 0", At: at} }

func review(t *testing.T, st *DeviceState) time.Time {
	t.Helper()
	at := t0.Add(24 * time.Hour)
	if got := st.NextDeadline(); !got.Equal(at) {
		t.Fatalf("review deadline %s, want %s", got, at)
	}
	acts := st.Tick(at)
	wantKinds(t, "lease end", acts, ActProbe)
	if st.State != Recovering || st.Review.Stage != StageProbe || acts[0].Check.Image != st.Policy.Probe.Image || st.Quarantine.Reviews != 1 {
		t.Fatalf("after lease end: %s %+v", st.State, st.Review)
	}
	acts = reviewOf(st).checkDone(ActProbe, pass(at), at)
	wantKinds(t, "probe passed", acts, ActRefreshRule)
	if acts[0].Key != TaintProbation || acts[0].Effect != policy.EffectNoSchedule || st.Review.Stage != StageProbation {
		t.Fatalf("probation action %+v, stage %s", acts[0], st.Review.Stage)
	}
	acts = reviewOf(st).ruleRefreshed(acts[0], policy.EffectNoSchedule, "", at)
	wantKinds(t, "probation applied", acts, ActCanary)
	if acts[0].Check.Namespace != policy.DefaultCanaryNamespace || st.Review.Stage != StageCanary {
		t.Fatalf("canary action %+v", acts[0])
	}
	wantKinds(t, "canary passed", reviewOf(st).checkDone(ActCanary, pass(at), at))
	if st.Review.Stage != StageStability || !st.Review.Until.Equal(at.Add(30*time.Minute)) || !st.NextDeadline().Equal(st.Review.Until) {
		t.Fatalf("stability: %+v, next %s", st.Review, st.NextDeadline())
	}
	return st.Review.Until
}

func TestReleaseAfterProbeCanaryAndWindow(t *testing.T) {
	st := quarantined(policy.Default())
	end := review(t, st)
	wantKinds(t, "window not over", st.Tick(end.Add(-time.Second)))
	acts := st.Tick(end)
	wantKinds(t, "window over", acts, ActRelease)
	if !reviewOf(st).firstReviewPassed() {
		t.Fatal("a first review that passed is not counted as a false quarantine")
	}
	acts = reviewOf(st).releaseDone(end)
	wantKinds(t, "released", acts, ActAlert)
	if st.State != Released || st.Quarantine != nil || st.Review != nil || len(st.Closed) != 1 || st.ReviewInterval != 0 {
		t.Fatalf("after release: %+v", st)
	}
	c := st.Closed[0]
	if c.ClosedBy != Actor || !c.ClosedAt.Equal(end) || !strings.Contains(c.CloseReason, "quarantine lease ended") || !strings.Contains(c.CloseReason, "canary passed") {
		t.Fatalf("closed record %+v", c)
	}
	// Released is in service: a new Unhealthy report quarantines again, an Unknown is suspected.
	if acts := st.Observe(obs(device.Unhealthy, 5, ""), end.Add(time.Minute)); len(acts) == 0 || acts[0].Kind != ActTaint {
		t.Fatalf("Unhealthy after release: %v", kinds(acts))
	}
	st2 := quarantined(policy.Default())
	review(t, st2)
	st2.Tick(end)
	reviewOf(st2).releaseDone(end)
	st2.Observe(obs(device.Unknown, 6, ""), end)
	if st2.State != Suspect {
		t.Fatalf("Unknown after release: %s", st2.State)
	}
}

func TestFailedProbeKeepsQuarantineAndBlocksRelease(t *testing.T) {
	st := quarantined(policy.Default())
	at := t0.Add(24 * time.Hour)
	st.Tick(at)
	acts := reviewOf(st).checkDone(ActProbe, StepResult{Reason: "pod failed: XID 79", At: at}, at)
	wantKinds(t, "probe failed", acts, ActRefreshRule, ActAlert)
	if st.State != Quarantined || st.Review != nil || st.ReviewInterval.D() != 48*time.Hour || !st.Quarantine.ExpiresAt.Equal(at.Add(48*time.Hour)) {
		t.Fatalf("after failed probe: state %s interval %s expiry %s", st.State, st.ReviewInterval, st.Quarantine.ExpiresAt)
	}
	if acts[0].Key != TaintQuarantine || !acts[0].ExpiresAt.Equal(st.Quarantine.ExpiresAt) {
		t.Fatalf("refresh %+v", acts[0])
	}
	err := st.Validate(Command{Kind: CmdRelease, Actor: "alice"})
	if err == nil || !strings.Contains(err.Error(), "last probe failed") || !strings.Contains(err.Error(), "XID 79") {
		t.Fatalf("release after a failed probe: %v", err)
	}
	// The next review doubles again when it fails; a passing probe unblocks release.
	at2 := st.Quarantine.ExpiresAt
	st.Tick(at2)
	reviewOf(st).checkDone(ActProbe, StepResult{Reason: "still broken", At: at2}, at2)
	if st.ReviewInterval.D() != 96*time.Hour {
		t.Fatalf("interval after two failures %s", st.ReviewInterval)
	}
	at3 := st.Quarantine.ExpiresAt
	st.Tick(at3)
	reviewOf(st).checkDone(ActProbe, pass(at3), at3)
	st.Command(Command{Kind: CmdForceQuarantine, Actor: "bob"}, at3)
	if st.State != Quarantined || st.Validate(Command{Kind: CmdRelease, Actor: "alice"}) != nil {
		t.Fatalf("after a passing probe release is still refused: %v", st.Validate(Command{Kind: CmdRelease, Actor: "alice"}))
	}
}

func TestReviewIntervalIsCapped(t *testing.T) {
	st := quarantined(policy.Default())
	for i := 0; i < 12; i++ {
		at := st.Quarantine.ExpiresAt
		st.Tick(at)
		reviewOf(st).checkDone(ActProbe, StepResult{Reason: "broken", At: at}, at)
	}
	if st.ReviewInterval.D() != MaxReviewInterval {
		t.Fatalf("interval %s, want the cap %s", st.ReviewInterval, MaxReviewInterval)
	}
}

func TestCanaryFailureAndReportsDuringReviewGoBack(t *testing.T) {
	st := quarantined(policy.Default())
	at := t0.Add(24 * time.Hour)
	st.Tick(at)
	acts := reviewOf(st).checkDone(ActProbe, pass(at), at)
	reviewOf(st).ruleRefreshed(acts[0], policy.EffectNoSchedule, "", at)
	acts = reviewOf(st).checkDone(ActCanary, StepResult{Reason: "canary pod failed", At: at}, at)
	wantKinds(t, "canary failed", acts, ActRefreshRule, ActAlert)
	if st.State != Quarantined || acts[0].Key != TaintQuarantine || acts[0].Effect != policy.EffectNoSchedule || !strings.Contains(st.Transitions[len(st.Transitions)-1].Reason, "canary failed") {
		t.Fatalf("after failed canary: %s %+v", st.State, acts[0])
	}
	for _, h := range []device.Health{device.Unhealthy, device.Unknown} {
		st := quarantined(policy.Default())
		end := review(t, st)
		acts := st.Observe(obs(h, 3, ""), end.Add(-time.Minute))
		wantKinds(t, string(h)+" on probation", acts, ActRefreshRule, ActAlert)
		if st.State != Quarantined || st.ReviewInterval.D() != 48*time.Hour {
			t.Fatalf("%s on probation: %s, interval %s", h, st.State, st.ReviewInterval)
		}
		// The stale canary outcome of an ended review changes nothing.
		if acts := reviewOf(st).checkDone(ActCanary, pass(end), end); acts != nil || st.State != Quarantined {
			t.Fatal("an outcome after the review ended was applied")
		}
	}
}

func TestApprovalRequired(t *testing.T) {
	p := policy.Default()
	p.ApprovalRequired = true
	st := quarantined(p)
	end := review(t, st)
	acts := st.Tick(end)
	wantKinds(t, "window over", acts, ActRequestApproval)
	if st.Review.Stage != StageApproval || !st.Review.Until.Equal(end.Add(24*time.Hour)) || !strings.Contains(acts[0].Reason, "canary passed") {
		t.Fatalf("approval: %+v %+v", st.Review, acts[0])
	}
	if err := st.Validate(Command{Kind: CmdApprove, Actor: "U123"}); err != nil {
		t.Fatal(err)
	}
	acts = st.Command(Command{Kind: CmdApprove, Actor: "U123"}, end.Add(time.Hour))
	wantKinds(t, "approved", acts, ActRelease)
	reviewOf(st).releaseDone(end.Add(time.Hour))
	if st.State != Released || st.Closed[0].ClosedBy != "U123" {
		t.Fatalf("approved release closed by %q", st.Closed[0].ClosedBy)
	}

	st = quarantined(p)
	end = review(t, st)
	st.Tick(end)
	wantKinds(t, "rejected", st.Command(Command{Kind: CmdReject, Actor: "U9", Reason: "wait for vendor"}, end), ActRefreshRule, ActAlert)
	if st.State != Quarantined || st.ReviewInterval != 0 || !strings.Contains(st.Transitions[len(st.Transitions)-1].Reason, "wait for vendor") {
		t.Fatalf("rejected: %s interval %s", st.State, st.ReviewInterval)
	}

	st = quarantined(p)
	end = review(t, st)
	st.Tick(end)
	wantKinds(t, "approval timeout", st.Tick(end.Add(24*time.Hour)), ActRefreshRule, ActAlert)
	if st.State != Quarantined || st.Validate(Command{Kind: CmdApprove, Actor: "U1"}) == nil {
		t.Fatalf("after approval timeout: %s", st.State)
	}
}

func TestHowRecoveryStarts(t *testing.T) {
	st := quarantined(policy.Default())
	if acts := st.Observe(obs(device.Healthy, 2, ""), t0.Add(time.Minute)); acts != nil || st.State != Quarantined {
		t.Fatalf("a bare Healthy report started a review: %v", kinds(acts))
	}
	acts := st.Observe(obs(device.Healthy, 3, SourceClaimCondition), t0.Add(2*time.Minute))
	wantKinds(t, "driver healthy", acts, ActProbe)
	if !strings.Contains(st.Review.Trigger, "claim-condition") {
		t.Fatalf("trigger %q", st.Review.Trigger)
	}
	// The driver took its own slice taint off a device no pod holds any more.
	st = quarantined(policy.Default())
	untainted := Observation{Device: dev, Health: device.Healthy, ObservedAt: t0.Add(time.Second), Source: SourceSlice, Seq: &Seq{Term: 2, N: 1}}
	wantKinds(t, "driver untainted", st.Observe(untainted, t0.Add(time.Minute)), ActProbe)
	st = quarantined(policy.Default())
	untainted.Source, untainted.Seq = SourcePodStatus, &Seq{Term: 2, N: 2}
	if acts := st.Observe(untainted, t0.Add(time.Minute)); acts != nil || st.State != Quarantined {
		t.Fatalf("a Healthy with no reporters and no driver behind it started a review: %v", kinds(acts))
	}

	st = quarantined(policy.Default())
	wantKinds(t, "release", st.Command(Command{Kind: CmdRelease, Actor: "alice", Reason: "card reseated"}, t0), ActProbe)
	if st.Review.Actor != "alice" || !strings.Contains(st.Review.Trigger, "card reseated") {
		t.Fatalf("release review %+v", st.Review)
	}
	if err := st.Validate(Command{Kind: CmdRelease, Actor: "alice"}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second release: %v", err)
	}

	// Paused: the lease end renews instead of reviewing.
	st = quarantined(policy.Default())
	st.Command(Command{Kind: CmdPause, Actor: "alice"}, t0)
	acts = st.Tick(t0.Add(24 * time.Hour))
	wantKinds(t, "paused lease end", acts, ActAlert, ActRefreshRule)
	if st.State != Quarantined || !st.Quarantine.ExpiresAt.Equal(t0.Add(48*time.Hour)) {
		t.Fatalf("paused: %s until %s", st.State, st.Quarantine.ExpiresAt)
	}
}

func restricted(p policy.Policy) *DeviceState {
	st := NewState(dev, "node-1", p, false)
	st.rules.ReleasePath = true
	st.Observe(obs(device.Unknown, 1, ""), t0)
	for _, a := range st.Tick(t0.Add(5 * time.Minute)) {
		if a.Kind == ActTaint {
			fenceOf(st).applied(a, dev.TaintRuleName(), t0.Add(5*time.Minute))
		}
	}
	return st
}

func TestRestrictedDeviceRecoversOnHealthy(t *testing.T) {
	// Still in use: its own Pods' Healthy reports are the evidence; probe and canary are skipped
	// (they could not get the device), probation keeps new work off it through the window.
	st := restricted(policy.Default())
	if st.State != Restricted {
		t.Fatalf("state %s", st.State)
	}
	at := t0.Add(10 * time.Minute)
	acts := st.Observe(obs(device.Healthy, 2, ""), at)
	wantKinds(t, "healthy again", acts, ActRefreshRule)
	if st.Review.From != Restricted || !st.Review.ProbeSkipped || !st.Review.CanarySkipped || acts[0].Key != TaintProbation {
		t.Fatalf("review %+v", st.Review)
	}
	wantKinds(t, "probation applied", reviewOf(st).ruleRefreshed(acts[0], policy.EffectNoSchedule, "", at))
	if st.Review.Stage != StageStability {
		t.Fatalf("stage %s", st.Review.Stage)
	}
	wantKinds(t, "window over", st.Tick(at.Add(30*time.Minute)), ActRelease)
	if reviewOf(st).firstReviewPassed() {
		t.Fatal("a review without a probe counts toward false quarantines")
	}
	reviewOf(st).releaseDone(at.Add(30 * time.Minute))
	if st.State != Released || !strings.Contains(st.Closed[0].CloseReason, "its Pods report Healthy") {
		t.Fatalf("released: %s %+v", st.State, st.Closed)
	}

	// An Unknown report on probation sends it back to Restricted, with a restriction's effect.
	st = restricted(policy.Default())
	st.Observe(obs(device.Healthy, 2, ""), at)
	acts = st.Observe(obs(device.Unknown, 3, ""), at.Add(time.Minute))
	if st.State != Restricted || acts[0].Effect != policy.EffectNoSchedule || acts[0].Key != TaintQuarantine {
		t.Fatalf("Unknown on probation: %s %+v", st.State, acts)
	}
}

func TestFreedRestrictionIsReviewedAtLeaseEnd(t *testing.T) {
	p := policy.Default()
	p.TaintEffect = policy.EffectNoExecute
	st := restricted(p)
	st.Observe(Observation{Device: dev, Node: "node-1", Health: device.Unknown, StatusVersion: "2", ObservedAt: t0}, t0.Add(6*time.Minute))
	end := st.Quarantine.ExpiresAt
	wantKinds(t, "lease end, device free", st.Tick(end), ActProbe)
	acts := reviewOf(st).checkDone(ActProbe, StepResult{Reason: "no", At: end}, end)
	if st.State != Restricted || acts[0].Effect != policy.EffectNoSchedule {
		t.Fatalf("failed probe of a restriction: %s %+v", st.State, acts[0])
	}

	p.ProbeRestricted = false
	st = restricted(p)
	st.Observe(Observation{Device: dev, Node: "node-1", Health: device.Unknown, StatusVersion: "2", ObservedAt: t0}, t0.Add(6*time.Minute))
	acts = st.Tick(st.Quarantine.ExpiresAt)
	wantKinds(t, "probe skipped", acts, ActRefreshRule)
	wantKinds(t, "canary still runs", reviewOf(st).ruleRefreshed(acts[0], policy.EffectNoSchedule, "", st.Quarantine.ExpiresAt), ActCanary)

	// Still in use and still Unknown at lease end: renewed, alerted, the rule's expiry rewritten.
	st = restricted(policy.Default())
	acts = st.Tick(st.Quarantine.ExpiresAt)
	wantKinds(t, "in use at lease end", acts, ActAlert, ActRefreshRule)
	if st.State != Restricted {
		t.Fatalf("state %s", st.State)
	}
}

func TestHeartbeatRereadsTheFence(t *testing.T) {
	st := quarantined(policy.Default())
	acts := st.Observe(obs(device.Unhealthy, 1, ""), t0.Add(2*time.Minute))
	wantKinds(t, "heartbeat while quarantined", acts, ActInspectRule)
	st = NewState(dev, "node-1", policy.Default(), false)
	st.rules.ReleasePath = true
	st.Observe(obs(device.Healthy, 1, ""), t0)
	wantKinds(t, "heartbeat while healthy", st.Observe(obs(device.Healthy, 1, ""), t0.Add(2*time.Minute)))
	// A retired device's fence is re-read too; one under review is the review's to watch.
	st = quarantined(policy.Default())
	st.State = Retired
	wantKinds(t, "heartbeat while retired", st.Observe(obs(device.Unhealthy, 1, ""), t0.Add(2*time.Minute)), ActInspectRule)
	st.State = Recovering
	wantKinds(t, "heartbeat while recovering", st.Observe(obs(device.Unhealthy, 1, ""), t0.Add(3*time.Minute)))
}

func TestRuleRemovedOutsideIsAnOperatorRelease(t *testing.T) {
	st := quarantined(policy.Default())
	acts := st.Observe(obs(device.Unhealthy, 2, ""), t0.Add(time.Hour))
	wantKinds(t, "Unhealthy while quarantined", acts, ActInspectRule)
	acts = fenceOf(st).ruleSeen(RuleInfo{Name: "r", Present: false}, t0.Add(time.Hour))
	wantKinds(t, "rule gone, still Unhealthy", acts, ActAlert, ActTaint, ActAlert)
	if st.State != Released || st.Closed[0].ClosedBy != "unknown" || !strings.Contains(st.Closed[0].CloseReason, "deleted outside") {
		t.Fatalf("after rule deleted: %s %+v", st.State, st.Closed)
	}
	fenceOf(st).applied(acts[1], "r", t0.Add(time.Hour))
	if st.State != Quarantined {
		t.Fatalf("not quarantined again: %s", st.State)
	}

	for _, info := range []RuleInfo{{Name: "r", Present: true, Deleting: true, Key: TaintQuarantine, Actor: "kubectl"},
		{Name: "r", Present: true, Key: "other", Actor: "kubectl"}} {
		st := quarantined(policy.Default())
		st.Health = device.Healthy // last report healthy: no new taint
		acts := fenceOf(st).ruleSeen(info, t0)
		wantKinds(t, "rule "+info.Key, acts, ActAlert)
		if st.State != Released || st.Closed[0].ClosedBy != "kubectl" {
			t.Fatalf("rule %+v: %s %+v", info, st.State, st.Closed)
		}
	}

	st = quarantined(policy.Default())
	wantKinds(t, "rule in force", fenceOf(st).ruleSeen(RuleInfo{Name: "r", Present: true, Key: TaintQuarantine, Effect: policy.EffectNoSchedule, WantEffect: policy.EffectNoSchedule}, t0))
	acts = fenceOf(st).ruleSeen(RuleInfo{Name: "r", Present: true, Key: TaintQuarantine, Effect: policy.EffectNone, WantEffect: policy.EffectNoSchedule}, t0)
	wantKinds(t, "dry run turned off", acts, ActRefreshRule)
	if acts[0].Effect != policy.EffectNoSchedule || acts[0].Key != TaintQuarantine {
		t.Fatalf("refresh %+v", acts[0])
	}
	if st.State != Quarantined {
		t.Fatalf("state %s", st.State)
	}
	// Not fenced: nothing to reconcile.
	st = NewState(dev, "node-1", policy.Default(), false)
	st.rules.ReleasePath = true
	if acts := fenceOf(st).ruleSeen(RuleInfo{Name: "r"}, t0); acts != nil || st.State != Healthy {
		t.Fatal("a healthy device reconciled a rule")
	}
}

func TestTaintFailuresAlert(t *testing.T) {
	st := NewState(dev, "node-1", policy.Default(), false)
	st.rules.ReleasePath = true
	act := st.Observe(obs(device.Unhealthy, 1, ""), t0)[0]
	alerts := 0
	for i := 1; i <= 20; i++ {
		acts := fenceOf(st).taintFailed(act, "forbidden", t0)
		alerts += len(acts)
		if i == 1 && (len(acts) != 1 || acts[0].Level != LevelCritical || !strings.Contains(acts[0].Reason, "forbidden")) {
			t.Fatalf("first failure: %+v", acts)
		}
	}
	if alerts != 3 || st.Held == nil || !st.RetryAt.Equal(t0.Add(BreakerRetry)) {
		t.Fatalf("20 failures gave %d alerts (want 3: 1st, 10th, 20th), held %v", alerts, st.Held)
	}
	fenceOf(st).applied(act, "r", t0)
	if st.TaintFailures != 0 {
		t.Fatal("failures not reset by a taint that worked")
	}
}

func TestValidateCommands(t *testing.T) {
	q := quarantined(policy.Default())
	fresh := NewState(dev, "node-1", policy.Default(), false)
	fresh.rules.ReleasePath = true
	paused := quarantined(policy.Default())
	paused.Command(Command{Kind: CmdPause, Actor: "a"}, t0)
	tests := []struct {
		name string
		st   *DeviceState
		cmd  Command
		want string // "" = accepted
	}{
		{"unknown kind", q, Command{Kind: "reboot", Actor: "a"}, "unknown command"},
		{"no actor", q, Command{Kind: CmdExtend}, "actor is required"},
		{"long reason", q, Command{Kind: CmdExtend, Actor: "a", Reason: strings.Repeat("x", 1025)}, "at most 1024"},
		{"negative duration", q, Command{Kind: CmdExtend, Actor: "a", Duration: policy.JSONDuration(-time.Hour)}, "out of range"},
		{"huge duration", q, Command{Kind: CmdExtend, Actor: "a", Duration: policy.JSONDuration(400 * 24 * time.Hour)}, "out of range"},
		{"duration on pause", q, Command{Kind: CmdPause, Actor: "a", Duration: policy.JSONDuration(time.Hour)}, "takes no duration"},
		{"extend healthy", fresh, Command{Kind: CmdExtend, Actor: "a"}, "not quarantined"},
		{"release healthy", fresh, Command{Kind: CmdRelease, Actor: "a"}, "not quarantined"},
		{"approve nothing", q, Command{Kind: CmdApprove, Actor: "a"}, "no release is waiting"},
		{"reject nothing", q, Command{Kind: CmdReject, Actor: "a"}, "no release is waiting"},
		{"force twice", q, Command{Kind: CmdForceQuarantine, Actor: "a"}, "already quarantined"},
		{"pause twice", paused, Command{Kind: CmdPause, Actor: "a"}, "already paused"},
		{"resume unpaused", q, Command{Kind: CmdResume, Actor: "a"}, "not paused"},
		{"extend ok", q, Command{Kind: CmdExtend, Actor: "a", Duration: policy.JSONDuration(48 * time.Hour)}, ""},
		{"release ok", q, Command{Kind: CmdRelease, Actor: "a"}, ""},
		{"force fresh ok", fresh, Command{Kind: CmdForceQuarantine, Actor: "a", Reason: "silent data corruption"}, ""},
		{"resume ok", paused, Command{Kind: CmdResume, Actor: "a"}, ""},
	}
	for _, tt := range tests {
		err := tt.st.Validate(tt.cmd)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestExtendRewritesTheRuleExpiry(t *testing.T) {
	st := quarantined(policy.Default())
	acts := st.Command(Command{Kind: CmdExtend, Actor: "bob", Duration: policy.JSONDuration(48 * time.Hour)}, t0)
	wantKinds(t, "extend", acts, ActRefreshRule)
	if !acts[0].ExpiresAt.Equal(t0.Add(72*time.Hour)) || !st.Quarantine.ExpiresAt.Equal(t0.Add(72*time.Hour)) || acts[0].Key != TaintQuarantine {
		t.Fatalf("extend: %+v", acts[0])
	}
}

func TestJSONDuration(t *testing.T) {
	var c Command
	for in, want := range map[string]time.Duration{`{"duration":"48h"}`: 48 * time.Hour, `{"duration":172800000000000}`: 48 * time.Hour, `{"duration":""}`: 0, `{}`: 0} {
		c = Command{}
		if err := json.Unmarshal([]byte(in), &c); err != nil || c.Duration.D() != want {
			t.Errorf("%s -> %s, %v", in, c.Duration, err)
		}
	}
	for _, in := range []string{`{"duration":[1]}`, `{"duration":"soon"}`, `{"duration":true}`} {
		if err := json.Unmarshal([]byte(in), &c); err == nil {
			t.Errorf("%s decoded", in)
		}
	}
	b, _ := json.Marshal(Command{Kind: CmdExtend, Actor: "a", Duration: policy.JSONDuration(48 * time.Hour)})
	if !strings.Contains(string(b), `"duration":"48h0m0s"`) {
		t.Errorf("marshal: %s", b)
	}
	b, _ = json.Marshal(policy.Default())
	if !strings.Contains(string(b), `"quarantineLease":"24h0m0s"`) {
		t.Errorf("policy marshal: %s", b)
	}
}

func TestCommandsOnRestrictionsAndReviews(t *testing.T) {
	r := restricted(policy.Default())
	for _, c := range []Command{{Kind: CmdRelease, Actor: "a"}, {Kind: CmdExtend, Actor: "a"}} {
		if err := r.Validate(c); err != nil {
			t.Errorf("%s on a restriction: %v", c.Kind, err)
		}
	}
	acts := r.Command(Command{Kind: CmdExtend, Actor: "a"}, t0.Add(10*time.Minute))
	if want := t0.Add(5*time.Minute + 48*time.Hour); !r.Quarantine.ExpiresAt.Equal(want) || acts[0].Effect != policy.EffectNoSchedule {
		t.Fatalf("extend without duration: expiry %s, want %s (one more lease); %+v", r.Quarantine.ExpiresAt, want, acts)
	}
	q := quarantined(policy.Default())
	q.Command(Command{Kind: CmdRelease, Actor: "a"}, t0)
	if err := q.Validate(Command{Kind: CmdExtend, Actor: "a"}); err == nil || !strings.Contains(err.Error(), "not quarantined") {
		t.Fatalf("extend during a review: %v", err)
	}
	// Force-quarantine during a review ends it.
	if err := q.Validate(Command{Kind: CmdForceQuarantine, Actor: "b"}); err != nil {
		t.Fatal(err)
	}
	acts = q.Command(Command{Kind: CmdForceQuarantine, Actor: "b", Reason: "still flaky"}, t0.Add(time.Minute))
	wantKinds(t, "force during review", acts, ActRefreshRule, ActAlert)
	if q.State != Quarantined || q.Review != nil || !strings.Contains(q.Transitions[len(q.Transitions)-1].Reason, "forced by b: still flaky") {
		t.Fatalf("after force during review: %s %+v", q.State, q.Transitions[len(q.Transitions)-1])
	}
}

func TestRuleSeenDuringReviewAndRestriction(t *testing.T) {
	st := quarantined(policy.Default())
	st.Command(Command{Kind: CmdRelease, Actor: "a"}, t0)
	st.Health = device.Healthy
	wantKinds(t, "rule gone during review", fenceOf(st).ruleSeen(RuleInfo{Name: "r"}, t0), ActAlert)
	if st.State != Released || st.Review != nil {
		t.Fatalf("state %s", st.State)
	}
	// A restriction whose rule vanished, still Unknown: suspected again, not tainted at once.
	r := restricted(policy.Default())
	acts := fenceOf(r).ruleSeen(RuleInfo{Name: "r"}, t0.Add(time.Hour))
	wantKinds(t, "restriction's rule gone", acts, ActAlert, ActAlert)
	if r.State != Suspect {
		t.Fatalf("state %s", r.State)
	}
	// Rule gone, device Unhealthy but no Pod reports it any more: released, nothing to taint.
	q := quarantined(policy.Default())
	q.Reporters = nil
	wantKinds(t, "rule gone, device idle", fenceOf(q).ruleSeen(RuleInfo{Name: "r"}, t0), ActAlert)
}

func TestRefreshKeepsTheRecordTrue(t *testing.T) {
	st := quarantined(policy.Default())
	st.Quarantine.Effect = policy.EffectNone
	reviewOf(st).ruleRefreshed(Action{Kind: ActRefreshRule, Key: TaintQuarantine}, policy.EffectNoSchedule, "", t0)
	if st.Quarantine.Effect != policy.EffectNoSchedule {
		t.Fatalf("effect %s after a refresh", st.Quarantine.Effect)
	}
	reviewOf(st).ruleRefreshed(Action{Kind: ActRefreshRule, Key: TaintQuarantine}, "", "", t0)
	if st.Quarantine.Effect != policy.EffectNoSchedule {
		t.Fatal("a refresh that reported no effect blanked the record")
	}
	acts := reviewOf(st).ruleRefreshed(Action{Kind: ActRefreshRule, Key: TaintQuarantine}, "", "conflict", t0)
	wantKinds(t, "refresh failed outside a review", acts, ActAlert)
	// The probation taint failing ends the review, without doubling the interval.
	st.Command(Command{Kind: CmdRelease, Actor: "a"}, t0)
	probation := reviewOf(st).checkDone(ActProbe, pass(t0), t0)[0]
	acts = reviewOf(st).ruleRefreshed(probation, "", "forbidden", t0)
	if st.State != Quarantined || st.ReviewInterval != 0 || len(acts) != 2 {
		t.Fatalf("probation failed: %s %s %v", st.State, st.ReviewInterval, kinds(acts))
	}
}

func TestClosedRecordsAreBounded(t *testing.T) {
	st := quarantined(policy.Default())
	for i := 0; i < maxClosed+5; i++ {
		fenceOf(st).ruleSeen(RuleInfo{Name: "r", Actor: strconv.Itoa(i)}, t0)
		fenceOf(st).applied(Action{Kind: ActTaint, To: Quarantined, Reason: "again"}, "r", t0)
	}
	if len(st.Closed) != maxClosed || st.Closed[maxClosed-1].ClosedBy != strconv.Itoa(maxClosed+4) || st.Closed[0].ClosedBy != "5" {
		t.Fatalf("%d closed, last by %s", len(st.Closed), st.Closed[len(st.Closed)-1].ClosedBy)
	}
}

func TestHeartbeatOnARestriction(t *testing.T) {
	r := restricted(policy.Default())
	wantKinds(t, "heartbeat while restricted", r.Observe(obs(device.Unknown, 1, ""), t0.Add(time.Hour)), ActInspectRule)
}

func TestObservationKeepsClassAndNode(t *testing.T) {
	st := NewState(dev, "node-1", policy.Default(), false)
	st.rules.ReleasePath = true
	o := obs(device.Unknown, 1, "")
	o.DeviceClass = "gpu.example.com"
	st.Observe(o, t0)
	o2 := obs(device.Unknown, 2, "")
	o2.Node = ""
	st.Observe(o2, t0)
	if st.DeviceClass != "gpu.example.com" || st.Node != "node-1" {
		t.Fatalf("class %q node %q", st.DeviceClass, st.Node)
	}
}

func TestSummary(t *testing.T) {
	st := quarantined(policy.Default())
	if s := st.Summary(); !strings.HasPrefix(s, "Quarantined since 2026-11-29T12:00:00Z (device reported Unhealthy, by devicewarden)") ||
		!strings.Contains(s, "next: recovery review (probe, canary, probation) at 2026-11-30T12:00:00Z") {
		t.Fatalf("quarantined: %s", s)
	}
	st.Command(Command{Kind: CmdRelease, Actor: "alice"}, t0)
	if s := st.Summary(); !strings.Contains(s, "Recovering since") || !strings.Contains(s, "next: probe running") {
		t.Fatalf("probe: %s", s)
	}
	acts := reviewOf(st).checkDone(ActProbe, pass(t0), t0)
	if s := st.Next(); s != "canary running on probation" {
		t.Fatalf("probation: %s", s)
	}
	reviewOf(st).ruleRefreshed(acts[0], policy.EffectNoSchedule, "", t0)
	reviewOf(st).checkDone(ActCanary, pass(t0), t0)
	if s := st.Next(); s != "release at 2026-11-29T12:30:00Z if nothing is reported" {
		t.Fatalf("window: %s", s)
	}
	p := policy.Default()
	p.ApprovalRequired = true
	a := quarantined(p)
	end := review(t, a)
	a.Tick(end)
	if s := a.Next(); !strings.HasPrefix(s, "waiting for approval until 2026-12-01T12:30:00Z") {
		t.Fatalf("approval: %s", s)
	}
	paused := quarantined(policy.Default())
	paused.Command(Command{Kind: CmdPause, Actor: "a"}, t0)
	if s := paused.Summary(); !strings.Contains(s, "automatic actions paused") || !strings.Contains(s, "next: lease renewed at") {
		t.Fatalf("paused: %s", s)
	}
	sus := NewState(dev, "node-1", policy.Default(), false)
	sus.Observe(obs(device.Unknown, 1, ""), t0)
	if s := sus.Next(); s != "restrict at 2026-11-29T12:05:00Z unless it reports Healthy" {
		t.Fatalf("suspect: %s", s)
	}
	for _, a := range sus.Tick(t0.Add(5 * time.Minute)) {
		fenceOf(sus).applied(a, dev.TaintRuleName(), t0.Add(5*time.Minute))
	}
	if s := sus.Next(); sus.State != Restricted || !strings.HasPrefix(s, "lease renewed at ") {
		t.Fatalf("restricted (%s): %s", sus.State, s)
	}
	held := NewState(dev, "node-1", policy.Default(), false)
	fenceOf(held).hold(Action{Kind: ActTaint, To: Quarantined}, "circuit breaker open", t0)
	if s := held.Next(); s != "retry Quarantined at 2026-11-29T12:00:30Z (circuit breaker open)" {
		t.Fatalf("held: %s", s)
	}
	if s := NewState(dev, "n", policy.Default(), false).Summary(); s != "Healthy; next: nothing until the device reports trouble" {
		t.Fatalf("fresh: %s", s)
	}
}

func TestWatcherSequenceOrdersObservations(t *testing.T) {
	st := NewState(dev, "node-1", policy.Default(), false)
	st.rules.ReleasePath = true
	at := func(o Observation, term int64, n uint64, version string) Observation {
		o.Seq, o.StatusVersion = &Seq{Term: term, N: n}, version
		return o
	}
	st.Observe(at(obs(device.Unknown, 0, ""), 100, 7, "9000"), t0)
	if st.State != Suspect {
		t.Fatalf("state %s", st.State)
	}
	// The old leader's late signal (same term, lower count) is ignored.
	st.Observe(at(obs(device.Healthy, 0, ""), 100, 6, "9001"), t0.Add(time.Second))
	if st.State != Suspect || st.Ignored != 1 {
		t.Fatalf("older sequence applied: %s, ignored %d", st.State, st.Ignored)
	}
	// A new leader after an etcd restore: a lower resourceVersion, a larger term: heard.
	st.Observe(at(obs(device.Healthy, 0, ""), 200, 1, "12"), t0.Add(2*time.Second))
	if st.State != Healthy {
		t.Fatalf("new leader's report ignored: %s", st.State)
	}
	// A heartbeat repeats the sequence: not a change, but the report is current.
	hb := at(obs(device.Healthy, 0, ""), 200, 1, "12")
	st.Observe(hb, t0.Add(time.Minute))
	if !st.LastHeard.Equal(t0.Add(time.Minute)) || st.Ignored != 2 {
		t.Fatalf("heartbeat: last heard %s, ignored %d", st.LastHeard, st.Ignored)
	}
	if !(Seq{Term: 1, N: 9}).Before(Seq{Term: 2, N: 0}) || (Seq{Term: 2, N: 1}).Before(Seq{Term: 2, N: 1}) {
		t.Fatal("Seq.Before")
	}
}

func TestDecisionsAreBoundToTheirReview(t *testing.T) {
	p := policy.Default()
	p.ApprovalRequired = true
	st := quarantined(p)
	end := review(t, st)
	st.Tick(end)
	earlier := st.Review.ID()
	// A later review of the device waits for approval now (its first was approved through the
	// CLI, and the device came back): it started a day later.
	st.Review.StartedAt = st.Review.StartedAt.Add(24 * time.Hour)
	if st.Review.Stage != StageApproval || st.Review.ID() == earlier {
		t.Fatalf("second review: %+v", st.Review)
	}
	for _, kind := range []CommandKind{CmdApprove, CmdReject, CmdReleaseApproval} {
		err := st.Validate(Command{Kind: kind, Actor: "slack:U1", Review: earlier})
		if err == nil || !strings.Contains(err.Error(), "made for the review started "+earlier) {
			t.Errorf("%s for the earlier review: %v", kind, err)
		}
		if err := st.Validate(Command{Kind: kind, Actor: "slack:U1", Review: st.Review.ID()}); err != nil {
			t.Errorf("%s for the review waiting: %v", kind, err)
		}
	}
	if err := st.Validate(Command{Kind: CmdApprove, Actor: "cli:bob"}); err != nil {
		t.Errorf("a decision naming no review: %v", err)
	}
	if err := st.Validate(Command{Kind: CmdExtend, Actor: "cli:bob", Review: st.Review.ID()}); err == nil {
		t.Error("extend took a review")
	}
}

func TestFailedProbeHoldsARestrictedDeviceInUse(t *testing.T) {
	for _, holds := range []bool{false, true} {
		st := restricted(policy.Default())
		st.rules.FailedProbeHolds = holds
		at := t0.Add(10 * time.Minute)
		st.LastProbe = &StepResult{Reason: "exit 1", At: at}
		acts := st.Observe(obs(device.Healthy, 2, ""), at)
		skipped := st.Review != nil && st.Review.CanarySkipped
		switch {
		case holds && (skipped || len(acts) != 1 || acts[0].Kind != ActProbe):
			t.Fatalf("after a failed probe: review %+v, actions %+v; want the probe run again", st.Review, acts)
		case !holds && !skipped:
			t.Fatalf("runs from before the change must replay as they ran: review %+v", st.Review)
		}
	}
}
