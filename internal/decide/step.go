package decide

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// The device workflow meets its decisions here, and only here: it starts a state (Start), hands
// each event to Step and carries out the actions it returns, each completed by Prepare with
// everything its activity needs; it checks an operator's update with Accept and reads where the
// device stands with Look. Everything else in this package is how the state decides.

// EventKind names what the device workflow saw.
type EventKind string

const (
	// EventObserved is a report from the watcher (Event.Observation).
	EventObserved EventKind = "observed"
	// EventCommanded is an operator's command accepted as an update (Event.Command).
	EventCommanded EventKind = "commanded"
	// EventSignalled is an operator's command sent as a signal (Event.Command, or
	// Event.BadPayload when it did not decode): it is checked here, when it arrives.
	EventSignalled EventKind = "signalled"
	// EventTick says the state's NextDeadline passed.
	EventTick EventKind = "tick"
	// EventWoken is the breaker's word that it may grant again.
	EventWoken EventKind = "woken"
	// EventResult is an action's outcome (Event.Result).
	EventResult EventKind = "result"
	// EventPolicy is the policy of a run started without one, as the running worker holds it
	// (Event.Policy).
	EventPolicy EventKind = "policy"
	// EventMigrating names the migrations the workflow started for the device's Pods
	// (Event.Migrations).
	EventMigrating EventKind = "migrating"
)

// Event is one thing the device workflow saw, at At (workflow time).
type Event struct {
	Kind        EventKind
	At          time.Time
	Observation Observation
	Command     Command
	Result      Result
	// BadPayload says why a signal's payload did not decode (EventSignalled).
	BadPayload string
	// AcceptedIn is the state an update's command was accepted in; with CheckRetired, a release
	// accepted before the device was retired does not release it after (EventCommanded).
	AcceptedIn   State
	CheckRetired bool
	Policy       policy.Policy
	Migrations   []string
}

// Input is what a run starts from: the workflow's input.
type Input struct {
	// Carried is the state of the run before, as JSON, when this run continues it.
	Carried json.RawMessage
	Device  device.ID
	Node    string
	Policy  policy.Policy
	DryRun  bool
	// Unit is a shared physical unit's forms, known when the run starts.
	Unit *device.Unit
}

// Start is the state a run decides with, under the run's own rules: carried, when the run
// continues an earlier one, else a new state for the device.
func Start(in Input, r Rules) (*DeviceState, error) {
	var st *DeviceState
	if len(in.Carried) > 0 {
		// Decoding is deterministic; workflowcheck flags the reflection encoding/json uses.
		err := json.Unmarshal(in.Carried, &st) //workflowcheck:ignore
		if err != nil {
			return nil, fmt.Errorf("the state carried from the run before does not decode: %w", err)
		}
	}
	if st == nil {
		st = NewState(in.Device, in.Node, in.Policy, in.DryRun)
		st.Unit = in.Unit
	} else if r.CarriedDefaults && st.Policy.Name != "" && !carriedField(in.Carried, "sourceWait") {
		st.Policy.SourceWait = policy.JSONDuration(policy.DefaultSourceWait)
	}
	st.Follow(r)
	return st, nil
}

// carriedField says whether the carried state's policy names field (a policy written before the
// field existed does not).
func carriedField(carried []byte, field string) bool {
	var st struct {
		Policy map[string]json.RawMessage `json:"policy"`
	}
	// Decoding is deterministic; workflowcheck flags the reflection encoding/json uses.
	err := json.Unmarshal(carried, &st) //workflowcheck:ignore
	if err != nil {
		return true // it decoded as a state above: keep what it says
	}
	_, ok := st.Policy[field]
	return ok
}

// Step applies one event to the state and returns the actions to carry out, in order.
func Step(st *DeviceState, ev Event) []Action {
	switch ev.Kind {
	case EventObserved:
		return st.Observe(ev.Observation, ev.At)
	case EventCommanded:
		if ev.CheckRetired && ev.Command.Kind == CmdRelease && st.State == Retired && ev.AcceptedIn != Retired {
			// Accepted before the retirement, it reached the loop after: the release was asked of a
			// device that was not retired, and does not release a retired one.
			return nil
		}
		return st.Command(ev.Command, ev.At)
	case EventSignalled:
		return st.signalled(ev)
	case EventTick:
		return st.Tick(ev.At)
	case EventWoken:
		return st.Woken(ev.At)
	case EventResult:
		return st.Report(ev.Result, ev.At)
	case EventPolicy:
		st.Policy = ev.Policy
	case EventMigrating:
		for _, id := range ev.Migrations {
			if !slices.Contains(st.Migrations, id) {
				st.Migrations = append(st.Migrations, id)
			}
		}
	}
	return nil
}

// signalled takes an operator's signal. A payload that did not decode, or a command the state
// refuses, is recorded (Dropped, LastDropped) and dropped instead of wedging the workflow.
func (st *DeviceState) signalled(ev Event) []Action {
	cmd := ev.Command
	switch {
	case ev.BadPayload != "":
		st.drop(fmt.Sprintf("%s signal dropped: payload does not decode: %s", cmd.Kind, ev.BadPayload))
		return nil
	case cmd.Kind == CmdRelease && st.State == Retired && st.rules.LadderTrust:
		// A signal is validated when it arrives, not when it was sent: one sent before the device
		// was retired would release it. A retired device is released by the command, which is
		// checked when it is accepted (`device release`).
		st.drop("release signal refused: the device is retired; release it with `device release`")
		return nil
	}
	if st.rules.ReleasePath {
		if err := st.Validate(cmd); err != nil {
			st.drop("signal refused: " + err.Error())
			return nil
		}
	}
	return st.Command(cmd, ev.At)
}

func (st *DeviceState) drop(why string) { st.Dropped, st.LastDropped = st.Dropped+1, why }

// Accept checks an operator's command where its update is accepted, and returns it bound to what
// it answers: an approval or rejection that names no ask answers the ask waiting now (under
// LadderTrust), and no other that may wait by the time the loop applies it.
func Accept(st *DeviceState, c Command) (Command, error) {
	if c.Review == "" && st.rules.LadderTrust && (c.Kind == CmdApprove || c.Kind == CmdReleaseApproval || c.Kind == CmdReject) {
		c.Review = st.Ask()
	}
	return c, st.Validate(c)
}

// View is where the device stands, for the workflow's loop: when to wake, whether the run may
// end, what its search attributes and details say, and the Pods of a unit to move.
type View struct {
	State State
	// Deadline is when the state next wants a Tick (zero: none).
	Deadline time.Time
	// Idle says nothing is left to watch: the run may end.
	Idle bool
	// RepairStep is the ladder's step and try ("reset 1/2"; "" when none).
	RepairStep string
	// Cause is the quarantine's cause and the step it chose ("xid 79 -> node (catalogue: xid
	// 79)"; "" when the quarantine has none, or none stands).
	Cause   string
	Summary string
	// LastReason is the newest transition's reason: an operator's command is answered with it.
	LastReason string
	// HoldersToMove are a unit's holders learnt of after its decision: each moves once.
	HoldersToMove []PodRef

	st *DeviceState
}

// Device is where the device stands for a person: the `view` query's answer. It is built when
// asked for, not at every turn of the loop.
func (v View) Device() devicemsg.DeviceView { return viewOf(v.st) }

// Look says where the device stands.
func Look(st *DeviceState) View {
	v := View{State: st.State, Deadline: st.NextDeadline(), Idle: st.Idle(), RepairStep: repairOf(st).repairStep(),
		Summary: st.Summary(), HoldersToMove: unitOf(st).holdersToMove(), Cause: causeOf(st).shown(), st: st}
	if n := len(st.Transitions); n > 0 {
		v.LastReason = st.Transitions[n-1].Reason
	}
	return v
}
