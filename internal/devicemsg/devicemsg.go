// Package devicemsg holds the values the device workflow takes and answers: a watcher's
// observation, an operator's command and its answer, a check's result, and the states a device
// is in. They are plain values with no decisions; package decide decides on them, and callers
// (the watcher, the Slack app, the CLI) use them without it.
package devicemsg

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Actor is recorded on decisions DeviceWarden makes by itself.
const Actor = "devicewarden"

// State is where a device stands in its remediation.
type State string

// Device states. Suspect and Restricted come from Unknown; Quarantined from Unhealthy or a person.
const (
	Healthy     State = "Healthy"
	Suspect     State = "Suspect"
	Restricted  State = "Restricted"
	Quarantined State = "Quarantined"
	Recovering  State = "Recovering"
	Released    State = "Released"
	// Retired is a device the ladder gave up on, or that relapsed too often: replace it. Only a
	// person releases it.
	Retired State = "Retired"
)

// Reporter says which pod, container and claim reported a health value.
type Reporter struct {
	Namespace string        `json:"namespace"`
	Pod       string        `json:"pod"`
	Container string        `json:"container"`
	Claim     string        `json:"claim"`
	Health    device.Health `json:"health"`
	// Slice names the ResourceSlice when the driver itself reported the device (its own taint).
	Slice string `json:"slice,omitempty"`
	// Device names the form of a shared unit the report is about (a partition, the whole GPU);
	// empty for a device that is a unit of its own.
	Device string `json:"device,omitempty"`
	// Silent: the Pod holds a form of a shared unit and reported nothing about it; it is listed
	// as a holder (it must move), its Healthy is no evidence that the device works.
	Silent bool `json:"silent,omitempty"`
	// Report names the DeviceHealthReport a detector wrote about the device, and Detector the
	// detector (its spec.source), when a report rather than a Pod said so.
	Report   string `json:"report,omitempty"`
	Detector string `json:"detector,omitempty"`
}

// PodHolds says whether a Pod is among the reporters: only a Pod holds a device (a driver's
// taint or a detector's report names a fault, not a job).
func PodHolds(rs []Reporter) bool {
	for _, r := range rs {
		if r.Pod != "" {
			return true
		}
	}
	return false
}

// Observation is one aggregated health report for one device, sent by the watcher.
type Observation struct {
	Device device.ID     `json:"device"`
	Node   string        `json:"node"`
	Health device.Health `json:"health"`
	// DeviceClass is the class the device was requested through, when known.
	DeviceClass string `json:"deviceClass,omitempty"`
	// Message is the driver's message of the worst report, if any.
	Message string `json:"message,omitempty"`
	// Source says where the report came from (SourcePodStatus when empty). Only the driver's own
	// word (a claim condition, a device re-published in its slice) may start a quarantined
	// device's recovery review; a bare Healthy from a Pod never does.
	Source Source `json:"source,omitempty"`
	// StatusVersion is the resourceVersion of the newest Pod status that carried the reports.
	StatusVersion string `json:"statusVersion"`
	// Seq orders a device's observations without parsing resourceVersions (opaque, and they go
	// backwards after an etcd restore): the watcher's term, then its counter. Absent from
	// observations sent before it existed.
	Seq        *Seq      `json:"seq,omitempty"`
	ObservedAt time.Time `json:"observedAt"`
	// Reporters is empty when no pod holds the device any more.
	Reporters []Reporter `json:"reporters,omitempty"`
	// Unit is set when Device is a shared physical unit (device.Unit.Device): the devices it is
	// published as now, each of which a fence must cover.
	Unit *device.Unit `json:"unit,omitempty"`
	// Cause is what the sources say made an Unhealthy report (an XID, a code, the driver's
	// recovery action), when they say it.
	Cause *cause.Cause `json:"cause,omitempty"`
	// Standing are the detectors' faults that still stand after their one delivery: a level
	// a detector still shows, such as a recovery action other than none ("dcgm: recovery-action:2").
	// They fence nothing and fail no review by arriving; a review waits for them to go before the
	// device is released (decide.Rules.SourceProof).
	Standing []string `json:"standing,omitempty"`
	// StandingUnread: the watcher has not yet read the detectors that keep standing words (a
	// new leader before Prometheus answered), so Standing says nothing of them: the workflow
	// keeps the words that stand (decide.Rules.KeepsStanding).
	StandingUnread bool `json:"standingUnread,omitempty"`
	// Words name the detectors' one-time words the observation carries (a node condition's
	// transition, a report's generation, a new XID), each a hash of the word: the workflow keeps
	// those it took, so a word sent again by a new leader, whose predecessor delivered it, is no
	// new fault (decide.Rules.History).
	Words []string `json:"words,omitempty"`
}

// Seq is a watcher-assigned order: a watcher that starts later (a new leader) has a larger Term;
// within a term N counts the watcher's changes. A heartbeat repeats the Seq it repeats.
type Seq struct {
	Term int64  `json:"term"`
	N    uint64 `json:"n"`
}

// Before reports whether s comes before o.
func (s Seq) Before(o Seq) bool {
	if s.Term != o.Term {
		return s.Term < o.Term
	}
	return s.N < o.N
}

// Source is where an observation came from.
type Source string

// Observation sources. The watcher sets them; an empty source is a Pod status report.
const (
	SourcePodStatus      Source = ""
	SourceClaimCondition Source = "claim-condition"
	SourceSlice          Source = "resource-slice"
	SourceNodeLease      Source = "node-lease"
	// SourceHealthReport is a detector's DeviceHealthReport (an NVSentinel event, a DCGM XID).
	SourceHealthReport Source = "health-report"
)

// FromDriver reports whether the driver itself said so (not a Pod's status).
func (s Source) FromDriver() bool { return s == SourceClaimCondition || s == SourceSlice }

// Alert levels.
const (
	LevelInfo     = "info"
	LevelWarning  = "warning"
	LevelCritical = "critical"
)

// CommandKind names an operator command.
type CommandKind string

// Operator commands: Temporal updates (validated, answered) and signals of the same names.
const (
	CmdForceQuarantine CommandKind = "force-quarantine"
	CmdRelease         CommandKind = "release"
	CmdExtend          CommandKind = "extend"
	CmdPause           CommandKind = "pause"
	CmdResume          CommandKind = "resume"
	CmdApprove         CommandKind = "approve"
	CmdReject          CommandKind = "reject"
	// CmdReleaseApproval is the older name of approve, kept for signals sent by existing tools.
	CmdReleaseApproval CommandKind = "release-approval"
)

// Commands lists every operator command.
var Commands = []CommandKind{CmdForceQuarantine, CmdRelease, CmdExtend, CmdPause, CmdResume, CmdApprove, CmdReject, CmdReleaseApproval}

// MaxReason bounds a command's reason, like the API bounds a health message.
const MaxReason = 1024

// Command is an operator's instruction for one device.
type Command struct {
	Kind   CommandKind `json:"kind"`
	Actor  string      `json:"actor"`
	Reason string      `json:"reason,omitempty"`
	// Duration is how much longer an `extend` keeps the quarantine, e.g. "48h" (default: one lease).
	Duration policy.JSONDuration `json:"duration,omitempty"`
	// Review names the review an approve or reject was made for (Review.ID); a decision for any
	// other review is refused. Slack's buttons always name theirs; empty means the review waiting
	// now.
	Review string `json:"review,omitempty"`
}

// CommandResult is a command's answer: the device's state after it and what happened.
type CommandResult struct {
	State   State  `json:"state"`
	Message string `json:"message"`
}

// StepResult is the outcome of a probe or canary.
type StepResult struct {
	Passed bool      `json:"passed"`
	Reason string    `json:"reason"`
	Pod    string    `json:"pod,omitempty"`
	At     time.Time `json:"at"`
	// Busy: a repair step found the device still allocated to another claim and ran nothing.
	Busy bool `json:"busy,omitempty"`
	// NotRun: the check failed before its Pod ran (no Pod, never scheduled, the device not
	// published): no verdict on the device's reset, so the breaker's brake does not count it.
	NotRun bool `json:"notRun,omitempty"`
	// BootID is the device's node's boot ID as a repair step saw it (a node step: after it), so
	// a later node step can tell that the node booted again since.
	BootID string `json:"bootID,omitempty"`
	// Holders are the Pods ("namespace/name") on the node that held devices when a node step
	// that moves them found it busy: the workflow moves them.
	Holders []string `json:"holders,omitempty"`
	// Joined is the device whose reset of the shared reset domain this reset step joined: it ran
	// no reset of its own, and took that one's outcome.
	Joined string `json:"joined,omitempty"`
}
