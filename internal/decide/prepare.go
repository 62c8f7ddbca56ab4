package decide

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Plan is everything an action's activity needs beyond the action itself, read from the state as
// the workflow takes the action up (Prepare). It is never part of the action's JSON: a held
// action is prepared again when it runs.
type Plan struct {
	// Drop says the action no longer applies, and why: the quarantine it acts on ended while it
	// waited its turn (a refresh before it found the rule deleted by hand).
	Drop string
	// Members are a unit's forms, whose rules go together ("" for a device of its own).
	Members []string
	// Channel is where the device's alerts and approval requests go ("" under runs before the
	// release path: the default channel).
	Channel string

	// A taint's: UnitUnknown says the unit's devices are not known yet (nothing to fence);
	// Lease is how long the rule lasts from when it is written; Reporters the Pods that reported
	// it; PreviousAt and PreviousClosedAt the last closed quarantine's; Migrate the Pods whose
	// workloads move off the device once it is fenced.
	UnitUnknown                  bool
	Lease                        time.Duration
	Reporters                    []Reporter
	PreviousAt, PreviousClosedAt time.Time
	Migrate                      []PodRef

	// A refresh's or a unit fence's: the reason and actor the rule keeps (the quarantine's).
	RuleReason, RuleActor string

	// A probe's, canary's or repair step's: the devices it runs on, in order, with the class and
	// the attributes that pin a Pod to one device; Review numbers the Pods (the quarantine's
	// review, or a repair try).
	Targets     []device.ID
	DeviceClass string
	Identity    []string
	Review      int
	// A repair step's: the step the ladder stands on, its try and when the try began, the devices
	// no other claim may hold, and the node's boot ID the quarantine's last try saw.
	Step     policy.RepairStep
	Try      int
	TryAt    time.Time
	Idle     []device.ID
	BootSeen string
	// Since is when the device's fault was last left unmended: its quarantine began, or its
	// latest try ended. A reset of its domain that another device started since reset it too.
	Since time.Time

	// An approval request's: the quarantine's reason, and the ask it names (a release review's
	// ID with its probe and canary, or a ladder step's ID and kind).
	QuarantineReason string
	Ask, AskStep     string
	Probe, Canary    *StepResult

	// A retirement's evidence.
	Evidence map[string]string

	// A release's: when the quarantine began, whether its first review passed, the step that
	// repaired it, the quarantine's cause class and first step, and whether the node's fences go
	// with the rule.
	QuarantinedAt     time.Time
	FirstReviewPassed bool
	RepairedBy        string
	CauseClass        string
	FirstStep         string
	NodeFence         bool
}

// needsQuarantine are the actions that act on the device's quarantine.
var needsQuarantine = map[ActionKind]bool{ActRepair: true, ActRequestApproval: true, ActRelease: true, ActFenceMembers: true, ActRetire: true}

// Prepare completes an action with its Plan, from the state now.
func Prepare(st *DeviceState, a Action) Action {
	p := &Plan{Members: unitOf(st).members()}
	a.Plan = p
	if st.Quarantine == nil && needsQuarantine[a.Kind] {
		p.Drop = "the quarantine ended"
		return a
	}
	if st.rules.ReleasePath {
		p.Channel = st.Policy.SlackChannel
	}
	switch a.Kind {
	case ActTaint:
		p.UnitUnknown, p.Lease, p.Reporters, p.Migrate = unitOf(st).unitUnknown(), fenceOf(st).lease(), st.Reporters, fenceOf(st).migrationPods(a)
		if n := len(st.Closed); n > 0 {
			p.PreviousAt, p.PreviousClosedAt = st.Closed[n-1].CreatedAt, st.Closed[n-1].ClosedAt
		}
	case ActRefreshRule:
		p.RuleReason = a.Reason
		if st.Quarantine != nil && a.Reason != st.Quarantine.Reason {
			p.RuleReason = st.Quarantine.Reason // the rule keeps the quarantine's reason; the step is in history
		}
	case ActFenceMembers:
		p.RuleReason, p.RuleActor = st.Quarantine.Reason, st.Quarantine.Actor
	case ActProbe, ActCanary, ActRepair:
		repairOf(st).prepareCheck(a, p)
	case ActRequestApproval:
		p.Channel = st.Policy.SlackChannel // an approval always goes to the policy's channel
		p.QuarantineReason = st.Quarantine.Reason
		if r := st.Review; r != nil {
			p.Probe, p.Canary, p.Ask = r.Probe, r.Canary, r.ID()
		} else {
			p.Ask, p.AskStep = st.StepApproval()
		}
	case ActRetire:
		p.Evidence = repairOf(st).evidence()
	case ActAppFault:
		p.Reporters = st.Reporters
	case ActEndNodeStep:
		p.Step = nodeStep(st.Policy)
	case ActRelease:
		p.QuarantinedAt, p.FirstReviewPassed, p.Reporters = st.Quarantine.CreatedAt, reviewOf(st).firstReviewPassed(), st.Reporters
		// A step that moves holders fences the node or the reset's domain; a reset whose domain is
		// wider than its device fences the domain while it runs: their fences go with the rule.
		wide := st.Policy.ResetDomain != "" && st.Policy.ResetDomain != policy.DomainDevice && st.Policy.Repair.Enabled()
		p.RepairedBy, p.NodeFence = repairOf(st).repairedBy(), st.Policy.Repair.MovesHolders() || st.Policy.Repair.ChecksNodes() || wide
		p.CauseClass, p.FirstStep = causeOf(st).class()
	}
	return a
}

// prepareCheck plans a probe, canary or repair step.
func (g repairing) prepareCheck(a Action, p *Plan) {
	st := g.st
	p.Targets, p.DeviceClass, p.Identity = unitOf(st).checkTargets(), st.DeviceClass, st.Policy.Identity
	if a.Check != nil && a.Check.DeviceClass != "" {
		p.DeviceClass = a.Check.DeviceClass
	}
	if a.Kind == ActRepair {
		p.Targets = unitOf(st).repairTarget()
		p.Step = repairOf(st).ladderStep()
		p.BootSeen = repairOf(st).bootSeen()
		if st.Quarantine != nil {
			p.Since = st.Quarantine.unmendedSince()
		}
	}
	if st.Quarantine == nil {
		return
	}
	p.Review = st.Quarantine.Reviews
	if l := st.Quarantine.Ladder; a.Kind == ActRepair && l != nil {
		p.Review, p.Try = len(l.Tries), len(l.Tries) // a repair Pod is keyed by its try
		if len(l.Tries) > 0 {
			p.TryAt = l.Tries[len(l.Tries)-1].At
		}
		p.Idle = unitOf(st).fencedDevices()
	}
}

// ladderStep is the step the quarantine's ladder stands on (a zero step when there is none).
func (g repairing) ladderStep() policy.RepairStep {
	st := g.st
	if st.Quarantine == nil || st.Quarantine.Ladder == nil || st.Quarantine.Ladder.Step >= len(st.Policy.Repair.Steps) {
		return policy.RepairStep{}
	}
	return st.Policy.Repair.Steps[st.Quarantine.Ladder.Step]
}

// nodeStep is the policy's node step (a zero step when it has none).
func nodeStep(p policy.Policy) policy.RepairStep {
	for _, s := range p.Repair.Steps {
		if s.Kind == policy.RepairNode {
			return s
		}
	}
	return policy.RepairStep{}
}
