package decide

import (
	"cmp"
	"fmt"
	"time"
)

// maxExtend bounds one `extend`.
const maxExtend = 365 * 24 * time.Hour

// Validate refuses a command that is malformed or makes no sense in the device's state; a refused
// command changes nothing (an update's validator leaves no trace in history).
func (st *DeviceState) Validate(c Command) error {
	known := false
	for _, k := range Commands {
		known = known || k == c.Kind
	}
	switch {
	case !known:
		return fmt.Errorf("unknown command %q", c.Kind)
	case c.Actor == "":
		return fmt.Errorf("%s: actor is required: every operator action is audited", c.Kind)
	case len(c.Reason) > MaxReason:
		return fmt.Errorf("%s: reason is %d characters, at most %d", c.Kind, len(c.Reason), MaxReason)
	case c.Duration < 0 || c.Duration.D() > maxExtend:
		return fmt.Errorf("%s: duration %s out of range (0 to %s)", c.Kind, c.Duration.D(), maxExtend)
	case c.Duration != 0 && c.Kind != CmdExtend:
		return fmt.Errorf("%s takes no duration", c.Kind)
	}
	switch c.Kind {
	case CmdForceQuarantine:
		if st.State == Quarantined {
			return fmt.Errorf("force-quarantine: already quarantined (%s)", st.Quarantine.Reason)
		}
		if st.State == Retired {
			return fmt.Errorf("force-quarantine: the device is retired and stays fenced")
		}
		if unitOf(st).unitUnknown() {
			return fmt.Errorf("force-quarantine: %s is a physical unit whose devices are not known yet; quarantine one of its devices, or wait for the watcher's report", st.Device)
		}
	case CmdRelease:
		if st.State == Recovering {
			return fmt.Errorf("release: a recovery review is already running (stage %s)", st.Review.Stage)
		}
		if st.Quarantine == nil || (st.State != Quarantined && st.State != Restricted && st.State != Retired) {
			return fmt.Errorf("release: device is %s, not quarantined or restricted", st.State)
		}
		if st.State == Retired {
			break // its review ends with a person's approval, whatever the policy says
		}
		if p := st.LastProbe; p != nil && !p.Passed {
			return fmt.Errorf("release: refused while the last probe failed (%s, %s); the next review at %s probes again",
				p.At.UTC().Format(time.RFC3339), p.Reason, st.Quarantine.ExpiresAt.UTC().Format(time.RFC3339))
		}
	case CmdExtend:
		if st.Quarantine == nil || (st.State != Quarantined && st.State != Restricted) {
			return fmt.Errorf("extend: device is %s, not quarantined or restricted", st.State)
		}
	case CmdPause:
		if st.Paused {
			return fmt.Errorf("pause: automatic actions are already paused")
		}
	case CmdResume:
		if !st.Paused {
			return fmt.Errorf("resume: automatic actions are not paused")
		}
	case CmdApprove, CmdReleaseApproval, CmdReject:
		if id, step := st.StepApproval(); id != "" {
			if c.Review != "" && c.Review != id {
				return fmt.Errorf("%s: made for %s, but the repair step waiting for approval is %s (%s): a message left over from an earlier step?", c.Kind, c.Review, id, step)
			}
			break
		}
		if st.Review == nil || st.Review.Stage != StageApproval {
			return fmt.Errorf("%s: no release is waiting for approval, nor a repair step (device is %s)", c.Kind, st.State)
		}
		if c.Review != "" && c.Review != st.Review.ID() {
			return fmt.Errorf("%s: made for the review started %s, but the one waiting started %s (a message left over from an earlier review?): look at its evidence and decide on it",
				c.Kind, c.Review, st.Review.ID())
		}
	}
	if c.Review != "" && c.Kind != CmdApprove && c.Kind != CmdReleaseApproval && c.Kind != CmdReject {
		return fmt.Errorf("%s takes no review", c.Kind)
	}
	return nil
}

// Command applies an operator command.
func (st *DeviceState) Command(c Command, now time.Time) []Action {
	actor := c.Actor
	if actor == "" {
		actor = "operator"
	}
	if !st.rules.ReleasePath {
		return st.legacyCommand(c, actor, now)
	}
	if st.answersAnother(c) {
		// Checked again where it is applied: the ask it answered ended while it queued (a report
		// failed the review, and the ladder now asks about a reboot).
		st.transition(st.State, fmt.Sprintf("%s by %s not applied: it answered %s, which no longer waits (%s)",
			c.Kind, actor, c.Review, cmp.Or(st.Ask(), "nothing waits")), actor, now)
		return nil
	}
	switch c.Kind {
	case CmdForceQuarantine:
		if st.State == Recovering {
			return reviewOf(st).reviewFailed("forced by "+actor+reasonSuffix(c.Reason), false, actor, now)
		}
	case CmdRelease:
		return reviewOf(st).startReview("release requested by "+actor+reasonSuffix(c.Reason), actor, now)
	case CmdExtend:
		st.legacyCommand(c, actor, now) // moves the expiry; the rule's annotation follows
		if st.Quarantine == nil {
			return nil
		}
		return []Action{{Kind: ActRefreshRule, Key: TaintQuarantine, Effect: fenceOf(st).wantEffect(st.State), ExpiresAt: st.Quarantine.ExpiresAt, Reason: "extended by " + actor, Actor: actor}}
	case CmdApprove, CmdReleaseApproval:
		if repairOf(st).stepAwaiting() {
			return repairOf(st).approveStep(actor, now)
		}
		if st.Review == nil || st.Review.Stage != StageApproval {
			return nil
		}
		st.Review.ApprovedBy = actor
		st.transition(st.State, "release approved by "+actor, actor, now)
		if acts, waiting := reviewOf(st).awaitSources(now); waiting {
			return acts // a source spoke since the ask: the release waits for it
		}
		st.Review.Stage = StageRelease
		return []Action{{Kind: ActRelease, Reason: reviewOf(st).reviewSummary(), Actor: actor}}
	case CmdReject:
		if repairOf(st).stepAwaiting() {
			return repairOf(st).stopForApproval("rejected by "+actor+reasonSuffix(c.Reason), actor, now)
		}
		if st.Review == nil || st.Review.Stage != StageApproval {
			return nil
		}
		return reviewOf(st).reviewFailed("release rejected by "+actor+reasonSuffix(c.Reason), false, actor, now)
	}
	return st.legacyCommand(c, actor, now)
}

// answersAnother says whether an approval or rejection names an ask other than the one waiting.
func (st *DeviceState) answersAnother(c Command) bool {
	decides := c.Kind == CmdApprove || c.Kind == CmdReleaseApproval || c.Kind == CmdReject
	return st.rules.LadderTrust && decides && c.Review != "" && c.Review != st.Ask()
}

// legacyCommand is the command handling of runs recorded before the release path (and pause/resume).
func (st *DeviceState) legacyCommand(c Command, actor string, now time.Time) []Action {
	switch c.Kind {
	case CmdForceQuarantine:
		if st.State == Quarantined {
			return nil
		}
		return []Action{{Kind: ActTaint, To: Quarantined, Effect: fenceOf(st).effect(st.Policy.TaintEffect), Reason: "forced by " + actor + reasonSuffix(c.Reason), Actor: actor}}
	case CmdExtend:
		if st.Quarantine == nil {
			return nil
		}
		d := c.Duration.D()
		if d <= 0 {
			d = st.Policy.QuarantineLease.D()
		}
		st.Quarantine.ExpiresAt = st.Quarantine.ExpiresAt.Add(d)
		st.transition(st.State, fmt.Sprintf("quarantine extended by %s to %s", d, st.Quarantine.ExpiresAt.UTC().Format(time.RFC3339)), actor, now)
	case CmdPause:
		st.Paused = true
		st.transition(st.State, "automatic actions paused", actor, now)
	case CmdResume:
		st.Paused = false
		st.transition(st.State, "automatic actions resumed", actor, now)
		if st.Held != nil {
			a := *st.Held
			fenceOf(st).clearHeld()
			return fenceOf(st).automatic(a)
		}
		return append(st.Tick(now), repairOf(st).climb(now)...)
	case CmdReleaseApproval:
		st.transition(st.State, "release approved", actor, now)
	}
	return nil
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}
