package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// commandRequest is an operator update waiting for the main loop to apply it.
type commandRequest struct {
	cmd decide.Command
	// from is the device's state when the update was accepted.
	from decide.State
	// checkRetired: a release that finds the device retired since it was accepted does not
	// release it (version 1 of release-after-retirement).
	checkRetired bool
	reply        workflow.Settable
}

// DeviceWorkflow is the long-lived entity workflow for one device (ID "device/<driver>/<pool>/<device>").
// Observations arrive as signals; operator commands as validated updates (or signals); a timer
// wakes it for the next deadline (tolerance end, staleness, breaker retry, review, lease end).
// internal/decide decides; this executes, one decision at a time.
func DeviceWorkflow(ctx workflow.Context, in api.DeviceInput) error {
	ctx = withChanges(ctx)
	if !takes(ctx, 1) {
		ctx = suggestionOnly(ctx) // deviceChanges came after the history bound
	}
	// The decision rules this run follows, from its own version markers: runs recorded before a
	// change replay without it.
	rules := decide.Rules{
		ReleasePath:         changed(ctx, "release-path"),
		StaleGraceOn:        changed(ctx, "stale-grace"),
		BreakerWake:         changed(ctx, "breaker-wake"),       // before: a held action asked every 30 s
		FailedProbeHolds:    changed(ctx, "failed-probe-holds"), // before: Healthy reports stood for a failed probe
		SilentNoEvidence:    takes(ctx, 7),
		Repair:              takes(ctx, 8),
		StepAlerts:          takes(ctx, 9),
		LadderTrust:         takes(ctx, 10),
		StepReports:         takes(ctx, 11),
		DetectorsNotHolders: takes(ctx, 12),
		Causes:              takes(ctx, 13),
		SourceProof:         takes(ctx, 14),
		ResetWake:           takes(ctx, 15),
		CarriedDefaults:     takes(ctx, 16),
		SourceVerdict:       takes(ctx, 16),
		RemapsReset:         takes(ctx, 16),
		FreshAsks:           takes(ctx, 16),
		KeepsStanding:       takes(ctx, 16),
		History:             takes(ctx, 17),
		TakenWords:          takes(ctx, 17),
		NotRunRetries:       takes(ctx, 18),
	}
	st, err := decide.Start(decide.Input{Carried: in.State, Device: in.Device, Node: in.Node, Policy: in.Policy, DryRun: in.DryRun, Unit: in.Unit}, rules)
	if err != nil {
		// As an input that does not decode: the workflow task fails and is retried (a fixed
		// worker takes it up), the run and its history stay.
		panic(err)
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryRules, func() (decide.Rules, error) { return rules, nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryState, func() (decide.DeviceState, error) { return *st, nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryView, func() (devicemsg.DeviceView, error) { return decide.Look(st).Device(), nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	updates := workflow.NewBufferedChannel(ctx, 64)
	if rules.ReleasePath {
		if err := registerUpdates(ctx, st, updates); err != nil {
			return err
		}
	}
	obsCh := workflow.GetSignalChannel(ctx, api.SignalObservation)
	wakeCh := workflow.GetSignalChannel(ctx, api.SignalBreakerWake)
	observed, err := registerObserve(ctx)
	if err != nil {
		return err
	}
	cmdChs := make([]workflow.ReceiveChannel, len(api.OperatorSignals))
	for i, name := range api.OperatorSignals {
		cmdChs[i] = workflow.GetSignalChannel(ctx, name)
	}
	if st.Policy.Name == "" {
		// After the handlers: the command that started this run (update-with-start) waits in
		// its channel while the worker is asked.
		decide.Step(st, decide.Event{Kind: decide.EventPolicy, At: workflow.Now(ctx), Policy: startPolicy(ctx, st.Device)})
	}
	inbox := append([]workflow.ReceiveChannel{obsCh, observed, updates, wakeCh}, cmdChs...)
	pending := func() bool {
		for _, c := range inbox {
			if c.Len() > 0 {
				return true
			}
		}
		return false
	}
	hist := newDeviceHistory(rules.History, len(in.State) == 0 || in.HistoryUnread)
	decideStep := func(ev decide.Event) []decide.Action {
		hist.before(ctx, st, ev)
		return decide.Step(st, ev)
	}
	var tm deadlineTimer
	view := decide.Look(st)
	lastState, lastSummary, lastRepair, lastCause := view.State, "", view.RepairStep, view.Cause
	var lastForms []string
	for {
		tm.reset(ctx, view.Deadline) // nothing changes the state between the last look and here
		var acts []decide.Action
		var answer *commandRequest
		sel := workflow.NewSelector(ctx)
		observe := func(c workflow.ReceiveChannel, _ bool) {
			var o decide.Observation
			c.Receive(ctx, &o)
			acts = decideStep(decide.Event{Kind: decide.EventObserved, At: workflow.Now(ctx), Observation: o})
		}
		sel.AddReceive(obsCh, observe)
		sel.AddReceive(observed, observe)
		sel.AddReceive(wakeCh, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
			acts = decideStep(decide.Event{Kind: decide.EventWoken, At: workflow.Now(ctx)})
		})
		for i, c := range cmdChs {
			kind := decide.CommandKind(api.OperatorSignals[i])
			sel.AddReceive(c, func(c workflow.ReceiveChannel, _ bool) {
				acts = receiveCommand(ctx, c, kind, st, decideStep)
			})
		}
		sel.AddReceive(updates, func(c workflow.ReceiveChannel, _ bool) {
			var req *commandRequest
			c.Receive(ctx, &req)
			answer = req
			acts = decideStep(decide.Event{Kind: decide.EventCommanded, At: workflow.Now(ctx), Command: req.cmd,
				AcceptedIn: req.from, CheckRetired: req.checkRetired})
		})
		if tm.future != nil {
			sel.AddFuture(tm.future, func(f workflow.Future) {
				tm.fired()
				if f.Get(ctx, nil) == nil { // a cancelled timer is not a deadline
					acts = decideStep(decide.Event{Kind: decide.EventTick, At: workflow.Now(ctx)})
				}
			})
		}
		canceled := false
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { canceled = true })
		sel.Select(ctx)
		if canceled {
			// An operator cancelled the workflow: stop deciding; rules already created stay.
			return ctx.Err()
		}
		xctx, notices := withFollowUps(ctx)
		if err := execute(xctx, st, acts); err != nil {
			return err
		}
		view = decide.Look(st)
		if pods := view.HoldersToMove; len(pods) > 0 {
			// A unit's holders are learnt of after its decision; each moves once.
			startMigrations(ctx, st, pods)
			decide.Step(st, decide.Event{Kind: decide.EventResult, At: workflow.Now(ctx), Result: decide.Result{Outcome: decide.Moving, Pods: pods}})
			view = decide.Look(st)
		}
		if answer != nil {
			answer.reply.SetValue(decide.CommandResult{State: view.State, Message: view.LastReason})
		}
		if !takes(ctx, 6) {
			notices.wait(ctx) // v5 waited for the notices before the search attributes
		}
		if view.State != lastState {
			lastState = view.State
			if err := workflow.UpsertTypedSearchAttributes(ctx, api.SearchDeviceState.ValueSet(string(view.State))); err != nil {
				workflow.GetLogger(ctx).Warn("upsert search attribute failed", "error", err)
			}
		}
		if step := view.RepairStep; step != lastRepair {
			// The ladder's step is searchable: `DeviceRepair != ''` lists every device being repaired.
			lastRepair = step
			upd := api.SearchDeviceRepair.ValueSet(step)
			if step == "" {
				upd = api.SearchDeviceRepair.ValueUnset()
			}
			if err := workflow.UpsertTypedSearchAttributes(ctx, upd); err != nil {
				workflow.GetLogger(ctx).Warn("upsert search attribute failed", "error", err)
			}
		}
		if c := view.Cause; rules.Causes && c != lastCause {
			// The cause is searchable: `DeviceCause STARTS_WITH 'xid 79'` lists the GPUs off the bus.
			lastCause = c
			upd := api.SearchDeviceCause.ValueSet(c)
			if c == "" {
				upd = api.SearchDeviceCause.ValueUnset()
			}
			if err := workflow.UpsertTypedSearchAttributes(ctx, upd); err != nil {
				workflow.GetLogger(ctx).Warn("upsert search attribute failed", "error", err)
			}
		}
		if forms := unitForms(st); forms != nil && !slices.Equal(forms, lastForms) {
			// A unit's forms are searchable, so any of them leads to its workflow.
			lastForms = forms
			if err := workflow.UpsertTypedSearchAttributes(ctx, api.SearchDeviceForms.ValueSet(forms)); err != nil {
				workflow.GetLogger(ctx).Warn("upsert search attribute failed", "error", err)
			}
		}
		if s := view.Summary; rules.ReleasePath && s != lastSummary {
			lastSummary = s
			workflow.SetCurrentDetails(ctx, s)
		}
		// The operator has the answer and the search attributes say where the device stands (a
		// form's next command finds its unit by them); now the alerts and the node report.
		notices.wait(ctx)
		if pending() {
			continue
		}
		if view.Idle || historyFull(ctx) {
			if err := handlersDone(ctx); err != nil {
				return err
			}
			if pending() {
				continue
			}
			// The history outlives the run (decision 0008); a signal that came during the write
			// is decided first, and the history written again after it.
			if err := hist.record(ctx, st); err != nil {
				return err
			}
			if pending() {
				continue
			}
			if view.Idle {
				// In service and held by no pod: nothing to watch. A later report starts a new run.
				return nil
			}
			next := in
			next.HistoryUnread = hist.unread()
			// Encoding the state is deterministic; workflowcheck flags the reflection encoding/json uses.
			next.State, err = json.Marshal(st) //workflowcheck:ignore
			if err != nil {
				return fmt.Errorf("carry the state to the next run: %w", err)
			}
			return continueAsNew(ctx, DeviceWorkflow, next)
		}
	}
}

// startPolicy is the policy of a run started without one (`device quarantine` of a device that
// has no workflow): the running worker's, never the starter's. Runs recorded before version 10
// took the built-in policy.
func startPolicy(ctx workflow.Context, id device.ID) policy.Policy {
	if !takes(ctx, 10) {
		return policy.Default()
	}
	var p policy.Policy
	in := remediation.PolicyInput{Driver: id.Driver}
	if err := executeLocal(kubeCallOptions(ctx), rem.DevicePolicy, in).Get(ctx, &p); err != nil || p.Name == "" {
		// The worker answers from memory; this is a worker that cannot run activities at all.
		workflow.GetLogger(ctx).Error("worker's policy not read; the built-in policy applies", "error", err)
		return policy.Default()
	}
	return p
}

// deadlineTimer keeps one timer for the next deadline and replaces it only when the deadline moves.
type deadlineTimer struct {
	future workflow.Future
	at     time.Time
	cancel workflow.CancelFunc
}

func (t *deadlineTimer) reset(ctx workflow.Context, next time.Time) {
	if next.Equal(t.at) {
		return
	}
	if t.cancel != nil {
		t.cancel()
	}
	t.future, t.at, t.cancel = nil, next, nil
	if !next.IsZero() {
		tctx, cancel := workflow.WithCancel(ctx)
		t.future, t.cancel = workflow.NewTimer(tctx, max(0, next.Sub(workflow.Now(ctx)))), cancel
	}
}

func (t *deadlineTimer) fired() { t.future, t.at = nil, time.Time{} }

// unitForms are a unit's devices as IDs ("<driver>/<pool>/<device>"); nil for a device of its own.
func unitForms(st *decide.DeviceState) []string {
	if st.Unit == nil {
		return nil
	}
	out := make([]string, 0, len(st.Unit.Devices))
	for _, id := range st.Unit.DeviceIDs() {
		out = append(out, id.String())
	}
	return out
}

// registerUpdates makes every operator command an update: the validator refuses what makes no
// sense (leaving no trace in history), the handler hands the command to the main loop and
// answers with the state it led to.
func registerUpdates(ctx workflow.Context, st *decide.DeviceState, updates workflow.Channel) error {
	for _, kind := range decide.Commands {
		kind := kind
		err := workflow.SetUpdateHandlerWithOptions(ctx, string(kind),
			func(ctx workflow.Context, cmd decide.Command) (decide.CommandResult, error) {
				cmd.Kind = kind
				// Bound to what it answers: the validator refused what does not stand.
				cmd, _ = decide.Accept(st, cmd)
				f, set := workflow.NewFuture(ctx)
				req := &commandRequest{cmd: cmd, from: st.State, reply: set}
				if kind == decide.CmdRelease {
					req.checkRetired = workflow.GetVersion(ctx, "release-after-retirement", workflow.DefaultVersion, 1) == 1
				}
				updates.Send(ctx, req)
				var res decide.CommandResult
				err := f.Get(ctx, &res)
				return res, err
			},
			workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, cmd decide.Command) error {
				cmd.Kind = kind
				_, err := decide.Accept(st, cmd)
				return err
			}})
		if err != nil {
			return fmt.Errorf("register update %s: %w", kind, err)
		}
	}
	return nil
}

// registerObserve takes the watcher's observations as updates. The handler only queues the
// observation for the main loop, which decides on it in the same workflow task; a payload that
// does not decode is refused by the SDK before it reaches the handler and leaves no history.
func registerObserve(ctx workflow.Context) (workflow.ReceiveChannel, error) {
	observed := workflow.NewBufferedChannel(ctx, 1024)
	err := workflow.SetUpdateHandler(ctx, api.UpdateObservation, func(ctx workflow.Context, obs decide.Observation) error {
		observed.Send(ctx, obs)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("register update %s: %w", api.UpdateObservation, err)
	}
	return observed, nil
}

// receiveCommand takes an operator signal. It decodes the payload itself, so one that does not
// decode (or that the device's state refuses) is recorded and dropped instead of wedging the loop.
func receiveCommand(ctx workflow.Context, c workflow.ReceiveChannel, kind decide.CommandKind, st *decide.DeviceState, decideStep func(decide.Event) []decide.Action) []decide.Action {
	var raw json.RawMessage
	c.Receive(ctx, &raw)
	ev := decide.Event{Kind: decide.EventSignalled, At: workflow.Now(ctx)}
	if len(raw) > 0 && string(raw) != "null" {
		// Decoding the payload into a local value is deterministic; workflowcheck flags the
		// reflection encoding/json uses.
		err := json.Unmarshal(raw, &ev.Command) //workflowcheck:ignore
		if err != nil {
			ev.Command, ev.BadPayload = decide.Command{}, err.Error()
		}
	}
	ev.Command.Kind = kind
	dropped := st.Dropped
	acts := decideStep(ev)
	if st.Dropped != dropped {
		workflow.GetLogger(ctx).Warn("operator signal dropped", "signal", kind, "why", st.LastDropped)
	}
	return acts
}
