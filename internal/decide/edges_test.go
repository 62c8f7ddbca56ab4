package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func TestCommandsOnTheLegacyPath(t *testing.T) {
	st := quarantined(policy.Default())
	st.rules.ReleasePath = false // runs recorded before the release path
	if acts := st.Command(Command{Kind: CmdForceQuarantine, Actor: "bob"}, t0); acts != nil {
		t.Fatalf("force-quarantine of a quarantined device: %v", acts)
	}
	fresh := NewState(device.ID{Driver: "d", Pool: "p", Device: "h"}, "n", policy.Default(), false)
	if acts := fresh.Command(Command{Kind: CmdExtend, Actor: "bob"}, t0); acts != nil || len(fresh.Transitions) != 0 {
		t.Fatalf("extend without a quarantine: %v", acts)
	}
	acts := fresh.Command(Command{Kind: CmdForceQuarantine}, t0)
	if len(acts) != 1 || acts[0].Actor != "operator" || acts[0].Reason != "forced by operator" {
		t.Fatalf("force-quarantine without actor: %+v", acts)
	}
	st.Command(Command{Kind: CmdReleaseApproval, Actor: "carol"}, t0)
	if last := st.Transitions[len(st.Transitions)-1]; last.Reason != "release approved" || last.Actor != "carol" {
		t.Fatalf("legacy approval: %+v", last)
	}
}

func TestCommandsOnTheReleasePath(t *testing.T) {
	st := quarantined(policy.Default())
	for _, k := range []CommandKind{CmdApprove, CmdReleaseApproval, CmdReject} {
		if acts := st.Command(Command{Kind: k, Actor: "bob"}, t0); acts != nil {
			t.Fatalf("%s with no release waiting: %v", k, acts)
		}
	}
	fresh := NewState(device.ID{Driver: "d", Pool: "p", Device: "h"}, "n", policy.Default(), false)
	fresh.rules.ReleasePath = true
	if acts := fresh.Command(Command{Kind: CmdExtend, Actor: "bob"}, t0); acts != nil {
		t.Fatalf("extend without a quarantine: %v", acts)
	}
	if acts := fresh.Command(Command{Kind: CmdRelease, Actor: "bob"}, t0); acts != nil {
		t.Fatalf("release of a device in service: %v", acts)
	}
	// Forced while a review runs: the review fails, the quarantine stays.
	st.Command(Command{Kind: CmdRelease, Actor: "bob"}, t0)
	if st.State != Recovering {
		t.Fatalf("release did not start a review: %s", st.State)
	}
	st.Command(Command{Kind: CmdForceQuarantine, Actor: "dave", Reason: "flaky"}, t0.Add(time.Minute))
	last := st.Transitions[len(st.Transitions)-1]
	if st.State != Quarantined || st.Review != nil || !strings.HasPrefix(last.Reason, "forced by dave: flaky") {
		t.Fatalf("state %s review %+v last %+v", st.State, st.Review, last)
	}
}

func TestReportMessageAndStaleness(t *testing.T) {
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", policy.Default(), false)
	obs := Observation{Health: device.Unknown, Message: "driver restarting", StatusVersion: "5", Reporters: []Reporter{{Pod: "p"}}}
	st.Observe(obs, t0)
	if last := st.Transitions[len(st.Transitions)-1]; !strings.HasPrefix(last.Reason, "device reported Unknown: driver restarting;") {
		t.Fatalf("reason %q", last.Reason)
	}
	st.Stale = true
	st.Observe(obs, t0.Add(time.Minute)) // the same report again: a heartbeat after staleness
	if st.Stale || !st.LastHeard.Equal(t0.Add(time.Minute)) {
		t.Fatalf("stale %v, last heard %v", st.Stale, st.LastHeard)
	}
}

func TestReviewEdges(t *testing.T) {
	p := policy.Default()
	p.StabilityWindow = 0
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", p, false)
	st.rules.ReleasePath = true
	fenceOf(st).applied(Action{Kind: ActTaint, To: Quarantined, Reason: "XID 79", Actor: Actor}, "rule", t0)
	st.Review = &Review{Stage: StageCanary, From: Quarantined}
	st.State = Recovering
	acts := reviewOf(st).startWindow(t0)
	if st.Review == nil || st.Review.Stage == StageStability {
		t.Fatalf("a zero window must end at once: review %+v, actions %+v", st.Review, acts)
	}
	noRecord := NewState(device.ID{Driver: "d", Pool: "p", Device: "h"}, "n", policy.Default(), false)
	noRecord.Review = &Review{Stage: StageProbe, From: Restricted}
	if acts := reviewOf(noRecord).reviewFailed("probe failed", false, Actor, t0); acts != nil || len(noRecord.Transitions) != 1 || noRecord.Review != nil {
		t.Fatalf("a review without a quarantine record: %v %+v", acts, noRecord.Transitions)
	}
	if acts := reviewOf(noRecord).releaseDone(t0); acts != nil {
		t.Fatalf("release done with no review: %v", acts)
	}
}

func TestSummaryOfHeldActions(t *testing.T) {
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", policy.Default(), false)
	fenceOf(st).hold(Action{Kind: ActTaint, To: Quarantined}, "circuit breaker open", t0)
	if n := st.Next(); n != "retry Quarantined at "+t0.Add(BreakerRetry).UTC().Format(time.RFC3339)+" (circuit breaker open)" {
		t.Fatalf("next %q", n)
	}
	st.Paused = true
	if n := st.Next(); n != "Quarantined held until resumed (circuit breaker open)" {
		t.Fatalf("next while paused %q", n)
	}
}

func TestBoundariesInSwitchCases(t *testing.T) {
	if _, err := policy.Parse([]byte("default:\n  migration: {enabled: true, perNode: 2, clusterWide: 2}\n")); err != nil {
		t.Fatalf("perNode equal to clusterWide: %v", err)
	}
	if _, err := policy.Parse([]byte("default:\n  migration: {enabled: true, perNode: 1, clusterWide: 1}\n")); err != nil {
		t.Fatalf("one migration at a time in the whole cluster: %v", err)
	}
	for _, field := range []string{"checkpointTimeout", "readyTimeout", "decisionTimeout", "evidenceKeep"} {
		if _, err := policy.Parse([]byte("default:\n  migration: {enabled: true, " + field + ": 0s}\n")); err == nil {
			t.Errorf("migration.%s of 0s accepted", field)
		}
	}
	st := NewState(device.ID{Driver: "d", Pool: "p", Device: "g"}, "n", policy.Default(), false)
	if err := st.Validate(Command{Kind: CmdPause, Actor: "bob", Reason: strings.Repeat("r", MaxReason)}); err != nil {
		t.Fatalf("a reason of exactly %d characters: %v", MaxReason, err)
	}
	if err := st.Validate(Command{Kind: CmdPause, Actor: "bob", Reason: strings.Repeat("r", MaxReason+1)}); err == nil {
		t.Fatal("a reason one character too long was accepted")
	}
	if err := st.Validate(Command{Kind: CmdPause, Actor: "bob", Duration: policy.JSONDuration(time.Hour)}); err == nil {
		t.Fatal("pause took a duration")
	}
	q := quarantined(policy.Default())
	if err := q.Validate(Command{Kind: CmdExtend, Actor: "bob", Duration: policy.JSONDuration(maxExtend)}); err != nil {
		t.Fatalf("extend by exactly the maximum: %v", err)
	}
	if err := q.Validate(Command{Kind: CmdExtend, Actor: "bob", Duration: policy.JSONDuration(maxExtend + 1)}); err == nil {
		t.Fatal("extend past the maximum accepted")
	}
}
