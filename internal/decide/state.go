package decide

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Rules are the decision rules a run follows. Each is a change that runs recorded before it
// replay without: the device workflow derives them from its own version markers at the start of
// every run and hands them to the state (Follow). They are not part of the device's state, so a
// run never carries one over from the run before it.
type Rules struct {
	// ReleasePath: the recovery review (probe, canary, probation, release); before it, a
	// quarantine was renewed until a person released it.
	ReleasePath bool `json:"releasePath,omitempty"`
	// StaleGraceOn: a late staleness deadline gets a grace (StaleGraceUntil).
	StaleGraceOn bool `json:"staleGraceOn,omitempty"`
	// BreakerWake: the breaker wakes this device when it may grant again, so a denied action
	// waits for that (or BreakerFallback) instead of asking every 30 s.
	BreakerWake bool `json:"breakerWake,omitempty"`
	// FailedProbeHolds: after a failed probe, a restricted device's review runs the probe again
	// instead of taking its Pods' Healthy reports as the evidence.
	FailedProbeHolds bool `json:"failedProbeHolds,omitempty"`
	// SilentNoEvidence: a silent holder's Healthy (Reporter.Silent) neither starts a restricted
	// unit's review nor stands for a probe and canary.
	SilentNoEvidence bool `json:"silentNoEvidence,omitempty"`
	// Repair: a quarantine climbs its policy's repair ladder, and a device can be Retired.
	Repair bool `json:"repair,omitempty"`
	// StepAlerts: a repair try that failed (its step, or the review after it) sends a warning
	// that says what comes next.
	StepAlerts bool `json:"stepAlerts,omitempty"`
	// LadderTrust: the ladder's rare paths hold. A step's approval names its ask (quarantine,
	// step, try) and is checked again where it is applied; a step that never ran (its approval
	// refused, timed out or overtaken by a release review) is asked again, never skipped;
	// retireAfter counts quarantines for a fault, not restrictions; and a retired device whose
	// rule goes missing during its review is fenced again, not released.
	LadderTrust bool `json:"ladderTrust,omitempty"`
	// StepReports: a report observed before the review that follows a passed repair step began
	// (a node's Unknown while it reboots, queued behind the step and the checks) describes the
	// device during its repair and does not fail the review; the review's checks decide.
	StepReports bool `json:"stepReports,omitempty"`
	// DetectorsNotHolders: only a Pod holds a device. A detector's word (its driver's taint, a
	// DeviceHealthReport, a DCGM series, a node condition) names a fault, not a job to move,
	// so it neither keeps the ladder from its next try nor stands for a holder in the summary.
	DetectorsNotHolders bool `json:"detectorsNotHolders,omitempty"`
	// Causes: a fault's cause chooses its first step (cause.Choose): an application's fault is
	// not fenced until they pile up, a reset- or reboot-first fault starts the ladder at that
	// step, a replace fault is retired at once. Runs before it climb every ladder from the start.
	Causes bool `json:"causes,omitempty"`
	// SourceProof: a review whose checks and window passed releases the device only once the
	// sources that reported its fault say Healthy too (no standing Unhealthy, no standing
	// detector's fault); it waits the policy's sourceWait for them, then fails, and the ladder
	// takes its next try.
	SourceProof bool `json:"sourceProof,omitempty"`
	// ResetWake: a ladder whose reset the breaker refused for its budget takes its try when the
	// breaker wakes it (a reset ended), not only when its 30 s retry comes.
	ResetWake bool `json:"resetWake,omitempty"`
	// CarriedDefaults: a policy carried from a run whose code had no sourceWait takes the
	// default wait (policy.DefaultSourceWait), not 0 ("do not wait"); the policy's JSON now
	// always names its sourceWait, so an explicit 0 stays 0.
	CarriedDefaults bool `json:"carriedDefaults,omitempty"`
	// SourceVerdict: a review that failed because a source still says the device needs a node
	// step (the driver's recovery action of node reboot that outlived a reset) takes the ladder's
	// node step next, not the reset's next attempt.
	SourceVerdict bool `json:"sourceVerdict,omitempty"`
	// RemapsReset: uncorrectable remapped rows that grew start at a reset, which applies the
	// pending remap (a remap failure still retires the GPU); runs before retired it at once.
	RemapsReset bool `json:"remapsReset,omitempty"`
	// FreshAsks: a step's approval asked again for the same try (the first refused or timed
	// out) carries an ID of its own (Ladder.Asks); before, the same ID, which the first ask's
	// button still carried.
	FreshAsks bool `json:"freshAsks,omitempty"`
	// KeepsStanding: an observation sent before its watcher read the detectors that keep
	// standing words (Observation.StandingUnread: a new leader whose Prometheus has not answered)
	// keeps the words that stand; before, it said nothing stood, and a review in its source wait
	// released the device.
	KeepsStanding bool `json:"keepsStanding,omitempty"`
	// History: the device's closed quarantines and application faults outlive its run (decision
	// 0008): a new run recalls them before its first decision on a fault, and the same report
	// sent again is not a second application fault (DeviceState.LastAppFault).
	History bool `json:"history,omitempty"`
	// TakenWords: an Unhealthy observation that says nothing but one-time words the device took
	// before (Observation.Words: a new leader re-sends what its predecessor delivered) is ignored;
	// before, it was a new fault and failed the review in progress.
	TakenWords bool `json:"takenWords,omitempty"`
	// NotRunRetries: a check or step that ended not run (StepResult.NotRun: the tooling failed,
	// not the device) is taken again later, each time later, and alerts a person after the
	// policy's notRunAlertAfter in a row; it never fails a review, never moves the ladder and
	// never retires the device. Before, it failed the review or the try like the device's verdict.
	NotRunRetries bool `json:"notRunRetries,omitempty"`
}

// Follow makes the state decide by r.
func (st *DeviceState) Follow(r Rules) { st.rules = r }

// Rules are the decision rules the state decides by.
func (st *DeviceState) Rules() Rules { return st.rules }

// QuarantineRecord is the auditable record of a quarantine or restriction.
type QuarantineRecord struct {
	RuleName  string    `json:"ruleName"`
	Effect    string    `json:"effect"`
	Reason    string    `json:"reason"`
	Actor     string    `json:"actor"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// State is what the fence was for: Quarantined (a fault, or a person's word) or Restricted
	// (Unknown for a whole tolerance window). Empty in records written before it was kept.
	State State `json:"state,omitempty"`
	// Reviews counts recovery reviews started for this quarantine.
	Reviews int `json:"reviews,omitempty"`
	// Ladder is where the quarantine stands on its policy's repair ladder (nil: none).
	Ladder *Ladder `json:"ladder,omitempty"`
	// Cause is what made the fault, and Choice the step it chose (Rules.Causes).
	Cause  *cause.Cause  `json:"cause,omitempty"`
	Choice *cause.Choice `json:"choice,omitempty"`
	// Closed* say who ended the quarantine, why and when.
	ClosedAt    time.Time `json:"closedAt,omitempty"`
	ClosedBy    string    `json:"closedBy,omitempty"`
	CloseReason string    `json:"closeReason,omitempty"`
}

// DeviceState is everything the device workflow knows; the `state` query returns it.
type DeviceState struct {
	Device device.ID     `json:"device"`
	Node   string        `json:"node"`
	Policy policy.Policy `json:"policy"`
	// DeviceClass is the class the device was last requested through (probes request it too).
	DeviceClass   string        `json:"deviceClass,omitempty"`
	DryRun        bool          `json:"dryRun,omitempty"`
	State         State         `json:"state"`
	Health        device.Health `json:"health"`
	Message       string        `json:"message,omitempty"`
	StatusVersion string        `json:"statusVersion,omitempty"`
	Seq           *Seq          `json:"seq,omitempty"`
	ObservedAt    time.Time     `json:"observedAt"`
	Reporters     []Reporter    `json:"reporters,omitempty"`
	// LastHeard is when the watcher last confirmed the current report (heartbeats included).
	LastHeard time.Time `json:"lastHeard"`
	// Stale is set when a Healthy report outlived the heartbeat limit.
	Stale bool `json:"stale,omitempty"`
	// UnknownEpisodes counts Unknown episodes; each one doubles the tolerance window up to the cap.
	UnknownEpisodes int               `json:"unknownEpisodes"`
	ToleranceUntil  time.Time         `json:"toleranceUntil,omitempty"`
	Quarantine      *QuarantineRecord `json:"quarantine,omitempty"`
	// Migrations are the IDs of the migrations this device's quarantines started.
	Migrations []string `json:"migrations,omitempty"`
	// Moving are the Pods the current quarantine started migrations for.
	Moving []PodRef `json:"moving,omitempty"`
	// Held is an automatic action the circuit breaker withheld; it is retried at RetryAt.
	Held       *Action   `json:"held,omitempty"`
	HeldReason string    `json:"heldReason,omitempty"`
	RetryAt    time.Time `json:"retryAt,omitempty"`
	// Paused stops automatic actions for this device until an operator resumes it.
	Paused bool `json:"paused,omitempty"`
	// StaleGraceUntil is the grace a late staleness deadline gets while it runs (Rules.StaleGraceOn).
	StaleGraceUntil time.Time `json:"staleGraceUntil,omitempty"`
	// Review is the recovery review in progress (state Recovering).
	Review *Review `json:"review,omitempty"`
	// ReviewInterval is how long the next quarantine lasts before its review; it doubles after
	// every failed review (up to MaxReviewInterval) and resets on release.
	ReviewInterval policy.JSONDuration `json:"reviewInterval,omitempty"`
	// LastProbe is the newest probe outcome; a failed one blocks `release` until a probe passes.
	LastProbe *StepResult `json:"lastProbe,omitempty"`
	// Closed keeps the newest closed quarantine records.
	Closed []QuarantineRecord `json:"closed,omitempty"`
	// TaintFailures counts consecutive failed taint attempts (alerted, not retried silently).
	TaintFailures int `json:"taintFailures,omitempty"`
	// Dropped counts operator signals that did not decode or were refused; LastDropped says why.
	Dropped     int          `json:"dropped,omitempty"`
	LastDropped string       `json:"lastDropped,omitempty"`
	Transitions []Transition `json:"transitions,omitempty"`
	// Ignored counts observations dropped as duplicates or older than the last one.
	Ignored int `json:"ignored"`
	// Standing are the detectors' faults that still stand after their delivery (Observation.Standing).
	Standing []string `json:"standing,omitempty"`
	// Cause is what the sources said of the newest Unhealthy report (Rules.Causes).
	Cause *cause.Cause `json:"cause,omitempty"`
	// AppFaults are when the device reported an application's fault within the policy's window
	// and stayed in service; AppFaultsTotal counts them all.
	AppFaults      []time.Time `json:"appFaults,omitempty"`
	AppFaultsTotal int         `json:"appFaultsTotal,omitempty"`
	// LastAppFault is the status version of the report whose application fault was counted last
	// (Rules.History).
	LastAppFault string `json:"lastAppFault,omitempty"`
	// Taken are the newest one-time words (Observation.Words) the device took (Rules.TakenWords).
	Taken []string `json:"taken,omitempty"`
	// NotRun is the check or step that ended not run, waiting to be taken again (Rules.NotRunRetries).
	NotRun *NotRunWait `json:"notRun,omitempty"`
	// repeat: the observation being decided repeats the standing fault (same cause), whatever
	// made the Pod's status change.
	repeat bool
	// Unit is the physical unit this workflow fences, for a device published in several forms:
	// while fenced, every device it was ever seen with (a rule stands for each).
	Unit *device.Unit `json:"unit,omitempty"`

	// rules are the decision rules of the run deciding; not part of the device's state.
	rules Rules
}

// ActionKind is what an Action asks the workflow to do.
type ActionKind string

// Action kinds.
const (
	ActTaint ActionKind = "taint"
	ActAlert ActionKind = "alert"
	// ActInspectRule reads the device's DeviceTaintRule; the answer goes to RuleSeen.
	ActInspectRule ActionKind = "inspect-rule"
	// ActRefreshRule rewrites the rule's taint key, effect or expiry without a state change.
	ActRefreshRule ActionKind = "refresh-rule"
	// ActProbe and ActCanary run a check Pod on the device; the answer goes to CheckDone.
	ActProbe  ActionKind = "probe"
	ActCanary ActionKind = "canary"
	// ActRequestApproval asks people (Slack) to approve the release.
	ActRequestApproval ActionKind = "request-approval"
	// ActRelease deletes the device's rule; success goes to ReleaseDone.
	ActRelease ActionKind = "release"
	// ActFenceMembers extends a standing fence to every device of the unit (one joined it, or a
	// member's rule went missing) with the fence's key, effect, reason and expiry.
	ActFenceMembers ActionKind = "fence-members"
	// ActAppFault tells the tenant's Pods that the device reported their application's own
	// fault and stays in service (Rules.Causes).
	ActAppFault ActionKind = "app-fault"
	// ActEndNodeStep clears what the ladder's node step left on the node (its remediator object,
	// its fences of the node, the node's permit) when the quarantine ended without the step's
	// own cleanup: the device's rule was deleted by hand while the step moved holders.
	ActEndNodeStep ActionKind = "end-node-step"
)

// Taint keys: the quarantine fence, and probation (only canaries tolerate it).
const (
	TaintQuarantine = devicemsg.TaintQuarantine
	TaintProbation  = devicemsg.TaintProbation
)

// Action is one side effect the workflow must carry out. A taint's transition is applied only
// after the activity succeeded (see Applied), so a failed or withheld taint changes nothing.
type Action struct {
	Kind      ActionKind `json:"kind"`
	To        State      `json:"to,omitempty"`
	Effect    string     `json:"effect,omitempty"`
	Reason    string     `json:"reason"`
	Actor     string     `json:"actor,omitempty"`
	Automatic bool       `json:"automatic,omitempty"`
	Level     string     `json:"level,omitempty"`
	// Key is the taint key for taint and refresh actions ("" = the quarantine key).
	Key string `json:"key,omitempty"`
	// ExpiresAt is the expiry written on the rule by refresh actions.
	ExpiresAt time.Time `json:"expiresAt,omitempty"`
	// Check is the probe or canary to run.
	Check *policy.Check `json:"check,omitempty"`
	// Woken marks an automatic action retried because the breaker woke the device: its permit
	// request goes to the breaker even where a worker saw it open a moment ago.
	Woken bool `json:"woken,omitempty"`
	// Gather marks an alert that a fleet-wide event raises on many devices at once (an Unknown
	// report tolerated, Healthy again within the window): the worker may send it with others.
	Gather bool `json:"gather,omitempty"`
	// Cause and Choice go with a fault's taint (Rules.Causes): what made the fault and the
	// step it starts at, kept on the quarantine record the taint makes.
	Cause  *cause.Cause  `json:"cause,omitempty"`
	Choice *cause.Choice `json:"choice,omitempty"`
	// Plan is what the action's activity needs, filled by Prepare as the action is taken up.
	Plan *Plan `json:"-"`
}

// held reports whether a Pod holds the device among its reporters. Before
// DetectorsNotHolders, every reporter counted as one.
func held(st *DeviceState, rs []Reporter) bool {
	if !st.rules.DetectorsNotHolders {
		return len(rs) > 0
	}
	return devicemsg.PodHolds(rs)
}
