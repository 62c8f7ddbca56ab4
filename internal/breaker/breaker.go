package breaker

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Config caps automatic actions across the whole fleet.
type Config struct {
	// Window is the sliding window the cap counts over.
	Window time.Duration `json:"window"`
	// MaxCount is the most devices that may be tainted automatically within Window.
	MaxCount int `json:"maxCount"`
	// MaxPercent caps the same count as a percentage of known devices (0 disables it). A
	// percentage never allows fewer than one action, so a small fleet can still act.
	MaxPercent float64 `json:"maxPercent"`
	// MaxResets is the most devices the window allows repair steps (resets) on, a budget of
	// their own: a driver bug that fails every device must not reset a fleet. A device's further
	// tries within the window are its own grant again (0: DefaultMaxResets).
	MaxResets int `json:"maxResets,omitempty"`
	// MaxReboots is the most nodes of one node pool that node steps (reboots through the node's
	// remediator) may hold at a time, a budget of its own and a small one: a reboot ends every Pod
	// on the node (0: DefaultMaxReboots). The devices of one node share its permit.
	MaxReboots int `json:"maxReboots,omitempty"`
	// MaxResetFailures failed resets within Window stop resets until a person resumes the
	// breaker or the window passes them by (0: DefaultMaxResetFailures).
	MaxResetFailures int `json:"maxResetFailures,omitempty"`
}

// DefaultNodePoolLabels name node pools as the common node provisioners label them.
var DefaultNodePoolLabels = []string{"devicewarden.io/node-pool", "karpenter.sh/nodepool", "cloud.google.com/gke-nodepool",
	"eks.amazonaws.com/nodegroup", "kubernetes.azure.com/agentpool"}

// NodePool is the pool a node's labels name: the value of the first of keys (empty:
// DefaultNodePoolLabels) the node carries, or "" when it carries none.
func NodePool(labels map[string]string, keys []string) string {
	if len(keys) == 0 {
		keys = DefaultNodePoolLabels
	}
	for _, k := range keys {
		if v := labels[k]; v != "" {
			return v
		}
	}
	return ""
}

// DefaultMaxReboots is the node-step budget of a breaker configured without one.
const DefaultMaxReboots = 1

// Reboots is the node-step budget of the window.
func (c Config) Reboots() int {
	if c.MaxReboots > 0 {
		return c.MaxReboots
	}
	return DefaultMaxReboots
}

// Reboot is the breaker action of a node step of a repair ladder: a reboot of the device's node.
// Like resets, reboots draw on their own budget and never open the breaker.
const Reboot = decide.State("Reboot")

// OwnBudget says whether an action is a repair step's, with a budget of its own that never
// opens the breaker and is never leased to a worker in batches.
func OwnBudget(action decide.State) bool { return action == Reset || action == Reboot }

// DefaultMaxResets is the reset budget of a breaker configured without one.
const DefaultMaxResets = 5

// Resets is the reset budget of the window.
func (c Config) Resets() int {
	if c.MaxResets > 0 {
		return c.MaxResets
	}
	return DefaultMaxResets
}

// Reset is the breaker action of a repair step on a device (a reset Pod). Resets draw on their
// own budget and never open the breaker: one that is refused waits for the window to move.
const Reset = decide.State("Reset")

// DefaultConfig is the cap used when no flags are given.
func DefaultConfig() Config {
	return Config{Window: 10 * time.Minute, MaxCount: 20, MaxPercent: 10}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.MaxResets < 0 {
		return fmt.Errorf("breaker: max resets must be >= 0 (0 means %d), got %d", DefaultMaxResets, c.MaxResets)
	}
	if c.MaxResetFailures < 0 {
		return fmt.Errorf("breaker: max reset failures must be >= 0 (0 means %d), got %d", DefaultMaxResetFailures, c.MaxResetFailures)
	}
	if c.MaxReboots < 0 {
		return fmt.Errorf("breaker: max reboots must be >= 0 (0 means %d), got %d", DefaultMaxReboots, c.MaxReboots)
	}
	if c.Window <= 0 || c.MaxCount < 1 || c.MaxPercent < 0 || c.MaxPercent > 100 {
		return fmt.Errorf("breaker: window must be positive, max count >= 1, max percent within 0..100 (got %s, %d, %g)", c.Window, c.MaxCount, c.MaxPercent)
	}
	return nil
}

// PermitRequest asks the breaker for one automatic action.
type PermitRequest struct {
	Device device.ID `json:"device"`
	// Claim, when set, asks for an action on a ResourceClaim instead of a device (claim hygiene):
	// it is keyed "claim:<namespace>/<name>/<uid>" and draws on the same budget, but it is never
	// put on the wait list (claim hygiene looks again on its own timer).
	Claim        string       `json:"claim,omitempty"`
	Action       decide.State `json:"action"`
	KnownDevices int          `json:"knownDevices"`
	Config       Config       `json:"config"`
	// Woken: the breaker woke this device; the request must reach it.
	Woken bool `json:"woken,omitempty"`
	// Node and NodePool name a node step's node and the node's pool: the permit is the node's,
	// shared by every device on it, and held until released or for Hold (see acquireNode); a
	// reset's permit is held until released or for Hold too (0: DefaultResetHold).
	Node     string        `json:"node,omitempty"`
	NodePool string        `json:"nodePool,omitempty"`
	Hold     time.Duration `json:"hold,omitempty"`
}

// PermitResult is the breaker's answer.
type PermitResult struct {
	Granted bool   `json:"granted"`
	Reason  string `json:"reason,omitempty"`
	// Tripped is true only for the request that opened the breaker, so exactly one alert goes out.
	Tripped bool `json:"tripped,omitempty"`
	// Alerted: the worker took the held device's alert to send with the others held (never set
	// by the breaker itself).
	Alerted bool `json:"alerted,omitempty"`
}

// Grant is one automatic action the breaker allowed.
type Grant struct {
	Device string       `json:"device"`
	Action decide.State `json:"action"`
	At     time.Time    `json:"at"`
	// A node's permit (Device "node:<name>") is held by the device that took it, counts against
	// its node pool, and lasts until released or Until rather than for the window.
	Holder string    `json:"holder,omitempty"`
	Pool   string    `json:"pool,omitempty"`
	Until  time.Time `json:"until,omitempty"`
}

// State is the fleet-wide circuit breaker; one workflow owns it, so concurrent device
// workflows are answered one at a time and cannot race past the cap.
type State struct {
	Config    Config    `json:"config"`
	Open      bool      `json:"open"`
	Reason    string    `json:"reason,omitempty"`
	OpenedAt  time.Time `json:"openedAt,omitempty"`
	Grants    []Grant   `json:"grants,omitempty"`
	Denied    int       `json:"denied"`
	ResumedBy string    `json:"resumedBy,omitempty"`
	ResumedAt time.Time `json:"resumedAt,omitempty"`
	// SeparateBudgets gives restrictions (Unknown too long: NoSchedule, never eviction) a budget
	// of their own, so an Unknown storm cannot use up what confirmed Unhealthy quarantines need.
	// Set by breaker runs recorded after the change.
	SeparateBudgets bool `json:"separateBudgets,omitempty"`
	// RestrictionsOpen holds further restrictions once their budget is spent; quarantines go on.
	RestrictionsOpen   bool   `json:"restrictionsOpen,omitempty"`
	RestrictionsReason string `json:"restrictionsReason,omitempty"`
	// WakeWaiting: devices denied while the breaker is open wait to be woken (Waiting, oldest
	// first) instead of asking again every 30 s, and the configuration has one owner: the
	// `configure` update (ConfiguredBy), not every request. Set by runs recorded after the change.
	WakeWaiting  bool     `json:"wakeWaiting,omitempty"`
	Waiting      []string `json:"waiting,omitempty"`
	ConfiguredBy string   `json:"configuredBy,omitempty"`
	// OpenDeniesAll: an open breaker denies every request, a device already granted in the window
	// included (before, that repeat was granted even while paused by hand). Set by newer runs.
	OpenDeniesAll bool `json:"openDeniesAll,omitempty"`
	// SpendsOwnAction: a leased permit is recorded under the action that spent it, and a report
	// sent again is applied once (LeaseReport.Seq). Set by newer runs.
	SpendsOwnAction bool `json:"spendsOwnAction,omitempty"`
	// RenewsHolds: a node step that asks again for the node permit it holds (its holders still
	// moving) renews the hold from now, so the hold covers the reboot it serves; before, the
	// first request's expiry stood and a late reboot outlived its hold. Set by newer runs.
	RenewsHolds bool `json:"renewsHolds,omitempty"`
	// ResetsAtATime: the reset budget counts resets running at a time (each permit held until
	// its step ends), not resets per window; and failed resets within the window (ResetFailures)
	// hold resets (ResetsHeld) at Config.ResetFailuresMax(). Set by newer runs.
	ResetsAtATime bool `json:"resetsAtATime,omitempty"`
	// WakesResets: a device refused a reset for the budget waits in ResetWaiting, oldest first,
	// and is woken when a reset ends and frees a place (it also asks again on its own after 30 s).
	WakesResets      bool           `json:"wakesResets,omitempty"`
	ResetWaiting     []string       `json:"resetWaiting,omitempty"`
	ResetFailures    []ResetFailure `json:"resetFailures,omitempty"`
	ResetsHeld       bool           `json:"resetsHeld,omitempty"`
	ResetsHeldReason string         `json:"resetsHeldReason,omitempty"`
	// DeviceBrake: failed resets hold resets when that many devices failed within the window,
	// not that many resets (one GPU tried again is one device), and a failure reported after its
	// permit lapsed (a reset that outran its hold) still counts, once: the lapsed permits stay in
	// LapsedResets for the window. Set by newer runs.
	DeviceBrake  bool    `json:"deviceBrake,omitempty"`
	LapsedResets []Grant `json:"lapsedResets,omitempty"`
	// Known is the fleet size the latest request counted.
	Known int `json:"known,omitempty"`
	// Leases are batches of permits handed to workers ahead of their devices' requests (see
	// Lease); their unreported permits count as used.
	Leases    []Lease `json:"leases,omitempty"`
	NextLease int64   `json:"nextLease,omitempty"`
	// waitingSet mirrors Waiting for lookups; rebuilt when nil (not part of the state's JSON).
	waitingSet map[string]struct{}
}

// ClaimDeleted is the breaker action of deleting a leaked ResourceClaim (claim hygiene); it draws
// on the same budget as quarantines. It is an action, never a device's state.
const ClaimDeleted = decide.State("ClaimDeleted")

// Key names what a request acts on: the device, or "claim:" and the claim.
func (r PermitRequest) Key() string {
	if r.Claim != "" {
		return "claim:" + r.Claim
	}
	if r.Action == Reboot && r.Node != "" {
		return "node:" + r.Node
	}
	return r.Device.String()
}

// waitFor puts a denied device on the wait list; claims are not woken, they look again later.
func (b *State) waitFor(req PermitRequest) {
	if req.Claim == "" {
		b.wait(req.Device.String())
	}
}

// maxWaiting bounds the wait list; a device past it still retries on its own fallback timer.
const maxWaiting = 100000

// wait records a denied device (once) so a resume can wake it.
func (b *State) wait(device string) {
	if !b.WakeWaiting || len(b.Waiting) >= maxWaiting {
		return
	}
	if b.waitingSet == nil {
		b.waitingSet = make(map[string]struct{}, len(b.Waiting))
		for _, w := range b.Waiting {
			b.waitingSet[w] = struct{}{}
		}
	}
	if _, ok := b.waitingSet[device]; ok {
		return
	}
	b.waitingSet[device] = struct{}{}
	b.Waiting = append(b.Waiting, device)
}

// AddWaiting records devices that a worker denied on the breaker's behalf (it had just seen the
// breaker open): they wait to be woken like the ones the breaker denied itself.
func (b *State) AddWaiting(devices []string) {
	for _, d := range devices {
		b.wait(d)
	}
}

// Wake returns the waiting devices to wake now, oldest first: while the breaker is closed, as
// many as the fresh budget could grant plus one (that one re-opens the breaker if all still
// need their action, so the rest wait for the next resume rather than for nothing); none while
// it is open. Devices that no longer need their action simply do not ask; each device also
// retries on a long fallback timer, so none waits forever.
func (b *State) Wake() []string {
	if b.Open || b.RestrictionsOpen || len(b.Waiting) == 0 {
		return nil
	}
	n := min(len(b.Waiting), b.Config.Limit(b.Known)+1)
	out := b.Waiting[:n:n]
	b.Waiting = append([]string(nil), b.Waiting[n:]...)
	for _, d := range out {
		delete(b.waitingSet, d)
	}
	return out
}

// Configure sets the breaker's configuration; owner names who did (a worker, an operator).
func (b *State) Configure(c Config, owner string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	b.Config, b.ConfiguredBy = c, owner
	return nil
}

// budget names the budget an action draws on: restrictions have their own only with
// SeparateBudgets.
func (b *State) budget(action decide.State) string {
	if OwnBudget(action) {
		return BudgetOf(action)
	}
	if b.SeparateBudgets {
		return BudgetOf(action)
	}
	return BudgetOf(decide.Quarantined)
}

// Limit is how many actions the window allows for a fleet of known devices.
func (c Config) Limit(known int) int {
	limit := c.MaxCount
	if c.MaxPercent > 0 && known > 0 {
		limit = min(limit, max(1, int(c.MaxPercent*float64(known)/100)))
	}
	return limit
}

// Acquire grants or denies one automatic action.
func (b *State) Acquire(req PermitRequest, now time.Time) PermitResult {
	if req.Config.Window > 0 && (!b.WakeWaiting || b.ConfiguredBy == "") {
		// Runs before the change took the configuration from every request; now a request's
		// only counts until an owner configured the breaker.
		b.Config = req.Config
	}
	if req.KnownDevices > 0 {
		b.Known = req.KnownDevices
	}
	b.prune(now)
	if b.Open && b.OpenDeniesAll {
		b.Denied++
		b.waitFor(req)
		return PermitResult{Reason: "circuit breaker open: " + b.Reason}
	}
	key := req.Key()
	for i, g := range b.Grants {
		if g.Device == key && g.Action == req.Action {
			b.renew(i, req, now)
			return PermitResult{Granted: true, Reason: "already granted in this window"}
		}
	}
	if b.Open {
		b.Denied++
		b.waitFor(req)
		return PermitResult{Reason: "circuit breaker open: " + b.Reason}
	}
	limit := b.Config.Limit(req.KnownDevices)
	if req.Action == Reboot && req.Node != "" {
		return b.acquireNode(req, key, now)
	}
	if req.Action == Reset && b.ResetsAtATime {
		b.pruneFailures(now)
		return b.acquireReset(req, key, now)
	}
	if OwnBudget(req.Action) {
		max, what := b.Config.Resets(), "resets"
		if req.Action == Reboot {
			max, what = b.Config.Reboots(), "node steps"
		}
		if used := b.used(BudgetOf(req.Action)); used >= max {
			b.Denied++
			return PermitResult{Reason: fmt.Sprintf("%s budget spent: %d %s within %s (max %d); the device waits for the window to move",
				strings.ToLower(string(req.Action)), used, what, b.Config.Window, max)}
		}
		b.Grants = append(b.Grants, Grant{Device: key, Action: req.Action, At: now})
		return PermitResult{Granted: true}
	}
	if b.budget(req.Action) == "restrictions" {
		if b.RestrictionsOpen {
			b.Denied++
			b.waitFor(req)
			return PermitResult{Reason: "restrictions held: " + b.RestrictionsReason}
		}
		used := b.used("restrictions")
		if used >= limit {
			b.RestrictionsOpen, b.Denied = true, b.Denied+1
			b.waitFor(req)
			b.RestrictionsReason = fmt.Sprintf("%d restrictions within %s reached their cap of %d; quarantines keep their own budget; an operator must resume",
				used, b.Config.Window, limit)
			return PermitResult{Reason: "restrictions held: " + b.RestrictionsReason, Tripped: true}
		}
		b.Grants = append(b.Grants, Grant{Device: key, Action: req.Action, At: now})
		return PermitResult{Granted: true}
	}
	used := b.used("actions")
	if used >= limit {
		b.Open, b.OpenedAt, b.Denied = true, now, b.Denied+1
		b.waitFor(req)
		b.Reason = fmt.Sprintf("%d automatic actions within %s reached the cap of %d (max %d, %g%% of %d known devices); an operator must resume",
			used, b.Config.Window, limit, b.Config.MaxCount, b.Config.MaxPercent, req.KnownDevices)
		return PermitResult{Reason: "circuit breaker open: " + b.Reason, Tripped: true}
	}
	b.Grants = append(b.Grants, Grant{Device: key, Action: req.Action, At: now})
	return PermitResult{Granted: true}
}

// Resume re-arms the breaker and starts a fresh window; node permits in use stay held.
func (b *State) Resume(actor string, now time.Time) {
	// A node permit stays: its node is being rebooted, whatever the window.
	var held []Grant
	for _, g := range b.Grants {
		if !g.Until.IsZero() {
			held = append(held, g)
		}
	}
	b.Open, b.Reason, b.OpenedAt, b.Grants = false, "", time.Time{}, held
	b.RestrictionsOpen, b.RestrictionsReason = false, ""
	b.ResetFailures, b.ResetsHeld, b.ResetsHeldReason = nil, false, ""
	b.ResumedBy, b.ResumedAt = actor, now
}

// Trip opens the breaker by hand.
func (b *State) Trip(actor, reason string, now time.Time) {
	b.Open, b.OpenedAt, b.Reason = true, now, fmt.Sprintf("paused by %s: %s", actor, reason)
}

// MarshalJSON writes the window as a duration string ("10m0s"), like every other duration in
// payloads and queries.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config
	return json.Marshal(struct {
		plain
		Window policy.JSONDuration `json:"window"`
	}{plain(c), policy.JSONDuration(c.Window)})
}

// UnmarshalJSON reads the window as a string, or as nanoseconds from histories written before.
func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config
	var v struct {
		plain
		Window policy.JSONDuration `json:"window"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Config(v.plain)
	c.Window = v.Window.D()
	return nil
}
