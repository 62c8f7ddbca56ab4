package decide

import (
	"strconv"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

var (
	t0  = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	dev = device.ID{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"}
)

type step struct {
	at      time.Duration // after t0
	obs     *device.Health
	version int
	idle    bool
	tick    bool
	cmd     *Command
	// apply pretends every taint action succeeded (as the workflow does after the activity).
	hold string // when set, taint actions are withheld with this reason instead
}

func h(x device.Health) *device.Health { return &x }

func run(p policy.Policy, dryRun bool, steps []step) (*DeviceState, []Action) {
	st := NewState(dev, "node-1", p, dryRun)
	var all []Action
	for _, s := range steps {
		now := t0.Add(s.at)
		var acts []Action
		switch {
		case s.obs != nil:
			o := Observation{Device: dev, Node: "node-1", Health: *s.obs, StatusVersion: strconv.Itoa(s.version), ObservedAt: now,
				Reporters: []Reporter{{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: *s.obs}}}
			if s.idle {
				o.Reporters = nil
			}
			acts = st.Observe(o, now)
		case s.tick:
			acts = st.Tick(now)
		case s.cmd != nil:
			acts = st.Command(*s.cmd, now)
		}
		for _, a := range acts {
			if a.Kind == ActTaint {
				if s.hold != "" {
					fenceOf(st).hold(a, s.hold, now)
				} else {
					fenceOf(st).applied(a, dev.TaintRuleName(), now)
				}
			}
		}
		all = append(all, acts...)
	}
	return st, all
}

func taints(acts []Action) []Action {
	var out []Action
	for _, a := range acts {
		if a.Kind == ActTaint {
			out = append(out, a)
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	p := policy.Default() // tolerance 5m, cap 1h, heartbeat 10m, lease 24h
	tests := []struct {
		name        string
		dryRun      bool
		steps       []step
		wantState   State
		wantTaints  []string // effects, in order
		wantIgnored int
		check       func(t *testing.T, st *DeviceState, acts []Action)
	}{
		{name: "unhealthy quarantines at once with NoSchedule", steps: []step{{obs: h(device.Unhealthy), version: 1}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNoSchedule},
			check: func(t *testing.T, st *DeviceState, acts []Action) {
				q := st.Quarantine
				if q == nil || q.Actor != Actor || !q.ExpiresAt.Equal(t0.Add(24*time.Hour)) || q.Reason == "" {
					t.Fatalf("record %+v", q)
				}
				if acts[len(acts)-1].Kind != ActAlert {
					t.Fatal("no alert")
				}
			}},
		{name: "dry run taints with effect None", dryRun: true, steps: []step{{obs: h(device.Unhealthy), version: 1}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNone}},
		{name: "unknown then healthy inside the window: no taint", steps: []step{
			{obs: h(device.Unknown), version: 1}, {at: 4 * time.Minute, tick: true}, {at: 4 * time.Minute, obs: h(device.Healthy), version: 2},
			{at: 6 * time.Minute, tick: true}}, wantState: Healthy},
		{name: "unknown past the window restricts with NoSchedule, never evicts", steps: []step{
			{obs: h(device.Unknown), version: 1}, {at: 5 * time.Minute, tick: true}},
			wantState: Restricted, wantTaints: []string{policy.EffectNoSchedule}},
		{name: "unknown does not restrict before the window ends", steps: []step{
			{obs: h(device.Unknown), version: 1}, {at: 4*time.Minute + 59*time.Second, tick: true}}, wantState: Suspect},
		{name: "unknown with NoExecute policy still restricts with NoSchedule", steps: []step{
			{obs: h(device.Unknown), version: 1}, {at: 5 * time.Minute, tick: true}},
			wantState: Restricted, wantTaints: []string{policy.EffectNoSchedule}},
		{name: "repeated unknown episodes back off: 5m, 10m, 20m", steps: []step{
			{obs: h(device.Unknown), version: 1}, {at: time.Minute, obs: h(device.Healthy), version: 2},
			{at: 2 * time.Minute, obs: h(device.Unknown), version: 3}, {at: 3 * time.Minute, obs: h(device.Healthy), version: 4},
			{at: 4 * time.Minute, obs: h(device.Unknown), version: 5}},
			wantState: Suspect,
			check: func(t *testing.T, st *DeviceState, _ []Action) {
				if st.UnknownEpisodes != 3 || !st.ToleranceUntil.Equal(t0.Add(4*time.Minute+20*time.Minute)) {
					t.Fatalf("episodes %d, until %s", st.UnknownEpisodes, st.ToleranceUntil)
				}
			}},
		{name: "duplicate and older observations are ignored and counted", steps: []step{
			{obs: h(device.Healthy), version: 5}, {obs: h(device.Healthy), version: 5}, {obs: h(device.Unhealthy), version: 4}},
			wantState: Healthy, wantIgnored: 2},
		{name: "unhealthy after unknown upgrades the restriction to quarantine", steps: []step{
			{obs: h(device.Unknown), version: 1}, {at: 5 * time.Minute, tick: true}, {at: 6 * time.Minute, obs: h(device.Unhealthy), version: 2}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNoSchedule, policy.EffectNoSchedule}},
		{name: "stale healthy becomes unknown, then restricted", steps: []step{
			{obs: h(device.Healthy), version: 1}, {at: 10 * time.Minute, tick: true}, {at: 15 * time.Minute, tick: true}},
			wantState: Restricted, wantTaints: []string{policy.EffectNoSchedule},
			check: func(t *testing.T, st *DeviceState, _ []Action) {
				if !st.Stale || st.Health != device.Unknown {
					t.Fatalf("stale=%v health=%s", st.Stale, st.Health)
				}
			}},
		{name: "a heartbeat keeps healthy fresh", steps: []step{
			{obs: h(device.Healthy), version: 1}, {at: 9 * time.Minute, obs: h(device.Healthy), version: 1}, {at: 10 * time.Minute, tick: true}},
			wantState: Healthy, wantIgnored: 1},
		{name: "an idle device is never stale", steps: []step{
			{obs: h(device.Healthy), version: 1, idle: true}, {at: time.Hour, tick: true}}, wantState: Healthy},
		{name: "the breaker withholds; the action is retried later", steps: []step{
			{obs: h(device.Unhealthy), version: 1, hold: "breaker open"}, {at: 10 * time.Second, tick: true, hold: "breaker open"},
			{at: 30 * time.Second, tick: true}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNoSchedule, policy.EffectNoSchedule}},
		{name: "paused device takes no automatic action until resumed", steps: []step{
			{cmd: &Command{Kind: CmdPause, Actor: "alice"}}, {obs: h(device.Unhealthy), version: 1},
			{at: time.Minute, tick: true}, {at: 2 * time.Minute, cmd: &Command{Kind: CmdResume, Actor: "alice"}}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNoSchedule}},
		{name: "force-quarantine by a person records the actor", steps: []step{
			{cmd: &Command{Kind: CmdForceQuarantine, Actor: "bob", Reason: "ECC errors in dmesg"}}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNoSchedule},
			check: func(t *testing.T, st *DeviceState, _ []Action) {
				if st.Quarantine.Actor != "bob" || st.Transitions[0].Actor != "bob" {
					t.Fatalf("actor not recorded: %+v", st.Quarantine)
				}
			}},
		{name: "extend moves the expiry", steps: []step{
			{obs: h(device.Unhealthy), version: 1}, {cmd: &Command{Kind: CmdExtend, Actor: "bob", Duration: policy.JSONDuration(48 * time.Hour)}}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNoSchedule},
			check: func(t *testing.T, st *DeviceState, _ []Action) {
				if !st.Quarantine.ExpiresAt.Equal(t0.Add(72 * time.Hour)) {
					t.Fatalf("expires %s", st.Quarantine.ExpiresAt)
				}
			}},
		{name: "an expired quarantine is re-evaluated, never silently released", steps: []step{
			{obs: h(device.Unhealthy), version: 1}, {at: 24 * time.Hour, tick: true}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNoSchedule},
			check: func(t *testing.T, st *DeviceState, acts []Action) {
				if !st.Quarantine.ExpiresAt.Equal(t0.Add(48*time.Hour)) || acts[len(acts)-1].Kind != ActAlert {
					t.Fatalf("lease not renewed with an alert: %+v", st.Quarantine)
				}
			}},
		{name: "a quarantined device reporting healthy stays quarantined until released", steps: []step{
			{obs: h(device.Unhealthy), version: 1}, {at: time.Minute, obs: h(device.Healthy), version: 2}},
			wantState: Quarantined, wantTaints: []string{policy.EffectNoSchedule}},
		{name: "same version, new content later in time (a node outage) is taken", steps: []step{
			{obs: h(device.Healthy), version: 7}, {at: time.Minute, obs: h(device.Unknown), version: 7}},
			wantState: Suspect},
		{name: "suspect device released by its pods returns to healthy", steps: []step{
			{obs: h(device.Unknown), version: 1}, {at: time.Minute, obs: h(device.Unknown), version: 2, idle: true}},
			wantState: Healthy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := p
			if tt.name == "unknown with NoExecute policy still restricts with NoSchedule" {
				pol.TaintEffect = policy.EffectNoExecute
			}
			st, acts := run(pol, tt.dryRun, tt.steps)
			if st.State != tt.wantState {
				t.Fatalf("state = %s, want %s (transitions %+v)", st.State, tt.wantState, st.Transitions)
			}
			var effects []string
			for _, a := range taints(acts) {
				effects = append(effects, a.Effect)
			}
			if len(effects) != len(tt.wantTaints) {
				t.Fatalf("taints = %v, want %v", effects, tt.wantTaints)
			}
			for i := range effects {
				if effects[i] != tt.wantTaints[i] {
					t.Fatalf("taints = %v, want %v", effects, tt.wantTaints)
				}
			}
			if st.Ignored != tt.wantIgnored {
				t.Fatalf("ignored = %d, want %d", st.Ignored, tt.wantIgnored)
			}
			if tt.check != nil {
				tt.check(t, st, acts)
			}
		})
	}
}

func TestNextDeadline(t *testing.T) {
	st, _ := run(policy.Default(), false, []step{{obs: h(device.Healthy), version: 1}})
	if got := st.NextDeadline(); !got.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("healthy: next %s, want heartbeat limit", got)
	}
	st, _ = run(policy.Default(), false, []step{{obs: h(device.Unknown), version: 1}})
	if got := st.NextDeadline(); !got.Equal(t0.Add(5 * time.Minute)) {
		t.Fatalf("suspect: next %s, want tolerance end", got)
	}
	st, _ = run(policy.Default(), false, []step{{obs: h(device.Unhealthy), version: 1}})
	if got := st.NextDeadline(); !got.Equal(t0.Add(24 * time.Hour)) {
		t.Fatalf("quarantined: next %s, want lease expiry", got)
	}
	st, _ = run(policy.Default(), false, []step{{obs: h(device.Healthy), version: 1, idle: true}})
	if !st.NextDeadline().IsZero() || !st.Idle() {
		t.Fatal("idle healthy device should wait for nothing")
	}
}

func TestStaleGraceAfterTheWorkflowWasAway(t *testing.T) {
	limit := policy.Default().HeartbeatLimit.D()
	fresh := func(graceOn bool) *DeviceState {
		st := NewState(dev, "node-1", policy.Default(), false)
		st.rules.StaleGraceOn = graceOn
		st.Observe(obs(device.Healthy, 1, SourcePodStatus), t0)
		return st
	}
	late := t0.Add(limit + 20*time.Minute) // Temporal was down for 20 minutes past the deadline

	st := fresh(true)
	// StaleGrace is the watcher's default heartbeat interval, 2 minutes.
	if acts := st.Tick(late); st.Stale || len(acts) != 0 || !st.StaleGraceUntil.Equal(late.Add(2*time.Minute)) {
		t.Fatalf("late deadline: stale=%v acts=%v grace until %s", st.Stale, acts, st.StaleGraceUntil)
	}
	if next := st.NextDeadline(); !next.Equal(late.Add(StaleGrace)) {
		t.Fatalf("next deadline %s, want the grace's end", next)
	}
	st.Observe(obs(device.Healthy, 1, SourcePodStatus), late.Add(30*time.Second)) // the watcher's retried heartbeat
	if st.Stale || !st.StaleGraceUntil.IsZero() || st.State != Healthy {
		t.Fatalf("after the heartbeat: stale=%v grace %s state %s", st.Stale, st.StaleGraceUntil, st.State)
	}
	if next := st.NextDeadline(); !next.Equal(late.Add(30*time.Second + limit)) {
		t.Fatalf("next deadline %s, want a full limit after the heartbeat", next)
	}

	st = fresh(true)
	st.Tick(late)
	st.Tick(late.Add(StaleGrace))
	if !st.Stale || st.State != Suspect {
		t.Fatalf("no heartbeat within the grace: stale=%v state %s", st.Stale, st.State)
	}

	st = fresh(true)
	if st.Tick(t0.Add(limit + time.Second)); !st.Stale {
		t.Fatal("a deadline taken up on time waited for a grace")
	}
	st = fresh(false)
	if st.Tick(late); !st.Stale {
		t.Fatal("a run recorded before the grace waited for it")
	}
}
