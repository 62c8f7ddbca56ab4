package decide

import (
	"strings"

	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// viewOf is where the device stands, as the contract's view: what the `view` query answers.
func viewOf(st *DeviceState) devicemsg.DeviceView {
	v := devicemsg.DeviceView{Device: st.Device, Node: st.Node, Unit: st.Unit, State: st.State, Summary: st.Summary(), Next: st.Next(),
		Paused: st.Paused, Health: st.Health, Message: st.Message, StatusVersion: st.StatusVersion, ObservedAt: st.ObservedAt,
		LastHeard: st.LastHeard, Reporters: st.Reporters, Withheld: st.Held != nil, HeldReason: st.HeldReason, LastProbe: st.LastProbe, Migrations: st.Migrations,
		Transitions: st.Transitions, Dropped: st.Dropped, LastDropped: st.LastDropped, AppFaults: st.AppFaultsTotal, AppFaultsRecent: len(st.AppFaults), Standing: st.Standing,
		Policy: devicemsg.PolicyView{Name: st.Policy.Name, QuarantineLease: st.Policy.QuarantineLease,
			StabilityWindow: st.Policy.StabilityWindow, ApprovalRequired: st.Policy.ApprovalRequired}}
	if w := notRunOf(st).pending(); w != nil {
		v.NotRun = &devicemsg.NotRunView{Kind: string(w.Kind), Count: w.Count, Reason: w.Reason, RetryAt: w.RetryAt}
	}
	if q := st.Quarantine; q != nil {
		qv := quarantineView(*q)
		v.Quarantine = &qv
	}
	for _, q := range st.Closed {
		v.Closed = append(v.Closed, quarantineView(q))
	}
	if r := st.Review; r != nil {
		v.Review = &devicemsg.ReviewView{Stage: r.Stage, Trigger: r.Trigger, StartedAt: r.StartedAt, Until: r.Until,
			Probe: r.Probe, Canary: r.Canary, ApprovedBy: r.ApprovedBy, After: string(r.After)}
		if probe := st.Policy.ProbeFor(r.After); probe.Image != "" && !r.ProbeSkipped {
			v.Review.ProbeWith = strings.TrimSpace(probe.Image + " " + strings.Join(probe.Command, " "))
		}
	}
	return v
}

func quarantineView(q QuarantineRecord) devicemsg.QuarantineView {
	v := devicemsg.QuarantineView{RuleName: q.RuleName, Effect: q.Effect, Reason: q.Reason, Actor: q.Actor, CreatedAt: q.CreatedAt,
		ExpiresAt: q.ExpiresAt, Reviews: q.Reviews, ClosedAt: q.ClosedAt, ClosedBy: q.ClosedBy, CloseReason: q.CloseReason}
	if q.Cause != nil {
		v.Cause = q.Cause.String()
	}
	if c := q.Choice; c != nil {
		v.First, v.FirstWhy = string(c.First), c.Why
	}
	if l := q.Ladder; l != nil {
		v.Ladder = &devicemsg.LadderView{}
		for _, t := range l.Tries {
			v.Ladder.Tries = append(v.Ladder.Tries, devicemsg.TryView{Kind: string(t.Kind), Attempt: t.Attempt, At: t.At, Result: t.Result, Review: t.Review})
		}
	}
	return v
}
