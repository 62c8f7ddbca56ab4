package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// deviceModel is the cluster as the device workflow's activities see it (the device's rule, the
// breaker's answers, the checks' outcomes), what the test made them do next, and what the workflow
// did: enough to hold it to its promises.
type deviceModel struct {
	carrier
	simLog
	// mu guards the model: local activities run on goroutines of their own, a retried one beside
	// the attempt it replaces.
	mu          sync.Mutex
	rule        *remediation.QuarantineInput // the device's rule, nil when there is none
	names       map[string]bool              // every rule name the workflow created
	breakerOpen bool
	// The next quarantineFails Quarantine calls fail and may be retried, the last of them after it
	// acted (its result was lost); quarantineFatal makes the next one fail for good. checkFails
	// checks fail; releaseFails ReleaseRule calls fail, the last after it acted.
	quarantineFails, checkFails, releaseFails int
	// probeFails: the next probes and canaries fail, the repair steps between them pass (a step
	// that clears the fault and a review that finds it again).
	probeFails      int
	quarantineFatal bool
	// probeOK and canaryOK are the newest check outcomes since the rule was made.
	probeOK, canaryOK  *bool
	checkFailed        bool // a check ever failed: evidence of a fault
	unhealthySeen      bool // an Unhealthy observation was sent
	forced             bool // a force-quarantine was sent
	permits, automatic int
	updates            []*simUpdate
	// Unit mode (sim_unit_test.go): unit is what the driver publishes now, forms the forms that
	// have a rule; quarantineFaulted: a Quarantine call failed, so a fence may lag until the next
	// look; lost: a form's rule was deleted by hand and no call has written it since.
	unit              *device.Unit
	forms             map[string]bool
	quarantineFaulted bool
	lost              bool
	// Repair ladder: held says the newest observation sent named a Pod on the device; retired
	// that the workflow retired it and no release followed; resets counts repair steps run.
	// heldAt and idleAt are when the newest report naming a Pod, and naming none, reached the workflow.
	held, retired, releaseAsked        bool
	heldAt, idleAt, retiredAt, askedAt time.Time
	// actingAt is when the workflow first acted after the newest report reached it (reported: a
	// report came since it last acted). A decision is made on what the workflow knew when it began
	// acting on it: a report that arrived while it acted (a retried quarantine) is taken after.
	reported bool
	actingAt time.Time
	// sourcesFaultAt and sourcesClearAt are when the newest report that said the fault (Unhealthy,
	// or a detector's standing fault), and that said none, reached the workflow.
	sourcesFaultAt, sourcesClearAt time.Time
	// standing: the last observation that read the detectors said a level stands.
	standing             bool
	standingSeq          decide.Seq    // the newest report's order whose word on what stands is taken
	healthSeq            decide.Seq    // the newest report's order the run took (a new run takes any)
	health               device.Health // and its health
	resets, resetPermits int
	// lostFence is the decision of a Quarantine call that wrote its rule and lost its result: the
	// workflow's next call of it is the same fence, though a person deleted the rule meanwhile.
	lostFence string
	// resetTimeout is the reset step's check timeout; resetUntil when the newest reset permit
	// lapses unreleased (the breaker's default hold when the workflow asked for none).
	resetTimeout time.Duration
	resetUntil   time.Time
	// followOnAt: a retried quarantine succeeded then; the calls of that instant go on with its
	// decision.
	followOnAt time.Time
	lastPermit decide.State
	// stepApproval: the ladder's node step needs a person's approval; stepAskedAt is when the
	// workflow last asked for it, approvedAt when a person last sent an approval.
	stepApproval            bool
	stepAskedAt, approvedAt time.Time
	// nodeHolders are the other Pods on the node that a node step moving holders (moveHolders)
	// finds; holdersFound: the last try found some, moveAsked: the workflow looked for their
	// workloads since (each look moves one).
	moveHolders, holdersFound, moveAsked bool
	nodeHolders                          int
	// The ladder's rare paths (sim_ladder_test.go).
	ladder ladderModel
	causes causeModel
	// history is the device's history records: a run that ends idle leaves them to the next.
	history *historyStore
	// aimed draws sequences aimed at the node step's approvals (TestSimulateDeviceApprovals):
	// every quarantine climbs to an approved node step, and people answer its asks, old and new.
	aimed bool
	// leaders adds detectors' one-time words, and new leaders that send the last one again
	// (TestSimulateDeviceLeaders); lastWord is the newest word's observation, resent what the
	// step that sent it again saw before (sim_leaders_test.go).
	leaders  bool
	lastWord *decide.Observation
	resent   *resend
	// tooling adds checks and steps that do not run (TestSimulateDeviceTooling): the next
	// notRuns probes, canaries and resets end not run (sim_tooling_test.go).
	tooling bool
	notRuns int
}

// repairStep checks a repair step (a reset, or a node step's reboot) against the invariants and
// answers it as the activity would; ok says whether the step clears the fault.
func (m *deviceModel) repairStep(env *testsuite.TestWorkflowEnvironment, attempt int32, action decide.State, ok bool) decide.StepResult {
	if res, runs := m.stepStarts(env, attempt, action); !runs {
		return res
	}
	m.ladder.ran(action)
	if !ok {
		return decide.StepResult{Reason: string(action) + " did not clear the fault"}
	}
	m.ladder.passed = true
	return decide.StepResult{Passed: true, Reason: string(action) + " cleared the fault"}
}

// stepStarts checks a repair step as it starts against the invariants: its permit, its approval,
// the device idle and not retired. runs is false with the activity's answer when it finds the
// device still held and runs nothing.
func (m *deviceModel) stepStarts(env *testsuite.TestWorkflowEnvironment, attempt int32, action decide.State) (res decide.StepResult, runs bool) {
	if m.resets++; m.resets > m.resetPermits {
		m.violate("a repair step without the breaker's permit (%d steps, %d permits)", m.resets, m.resetPermits)
	}
	if m.lastPermit != action {
		m.violate("a %s step ran on a permit for %s", action, m.lastPermit)
	}
	if action == breaker.Reboot && m.stepApproval && (m.stepAskedAt.IsZero() || m.approvedAt.Before(m.stepAskedAt)) {
		m.violate("a node step that needs approval ran without one (asked %s, approved %s)", m.stepAskedAt, m.approvedAt)
	}
	if action == breaker.Reboot && m.stepApproval {
		m.ladder.stepRuns(m)
	}
	// A holder reported before the workflow began acting on this decision, and no report since
	// saying none holds it. (Reports sent in that instant may reach the workflow after its decision.)
	m.acting(env, attempt)
	if m.idleAt.Before(m.heldAt) && m.heldAt.Before(m.actingAt) {
		m.violate("a repair step was asked for with no report since the last holder's saying no Pod holds the device (held %s idle %s acting %s now %s)", m.heldAt.Format("15:04:05.000"), m.idleAt.Format("15:04:05.000"), m.actingAt.Format("15:04:05.000"), env.Now().Format("15:04:05.000"))
	}
	if m.held {
		// The activity finds the claim still allocated and runs nothing.
		return decide.StepResult{Busy: true, Reason: "claim ns/cl is still allocated"}, false
	}
	if m.retired {
		m.violate("a repair step ran on a retired device")
	}
	if m.ladder.lemonDue {
		m.violate("a %s step ran in the device's quarantine number %d for a fault, at retireAfter %d: a lemon repaired, not retired",
			action, m.ladder.faults, m.ladder.retireAfter)
	}
	return decide.StepResult{}, true
}

// sourcesSay takes a report the workflow was told of: what the sources say now is the newest
// report's health (an older one taken late, an update that completed after a new leader's signal,
// says nothing of now), and what stands by the newest report that read it. Callers hold m.mu and
// have taken the report's word on what stands.
func (m *deviceModel) sourcesSay(seq decide.Seq, h device.Health, now time.Time) {
	if !seq.Before(m.healthSeq) {
		m.healthSeq, m.health = seq, h
	}
	if m.health == device.Unhealthy || m.standing {
		m.sourcesFaultAt = now
	} else {
		m.sourcesClearAt = now
	}
}

// newFence says whether a Quarantine call of decision makes a new fence: a rule where there was
// none, or a stronger one, and not the call again of one whose result was lost. Callers hold m.mu.
func (m *deviceModel) newFence(decision string) bool {
	lost := m.lostFence == decision
	m.lostFence = ""
	return (m.rule == nil || m.rule.Decision != decision) && !lost
}

// checkPasses says whether the next check or repair step passes: not while faults are queued.
// acting marks the workflow acting: the first action after a report starts a decision's acts; a
// retried call (attempt > 1) is still the decision it was made for.
func (m *deviceModel) acting(env *testsuite.TestWorkflowEnvironment, attempt int32) {
	if attempt <= 1 && env.Now().Equal(m.followOnAt) {
		return // the retried quarantine's decision goes on in its instant
	}
	if attempt <= 1 && (m.reported || m.actingAt.IsZero()) {
		m.actingAt, m.reported = env.Now(), false
	}
}

func (m *deviceModel) checkPasses() bool {
	if m.checkFails == 0 {
		return true
	}
	m.checkFails--
	m.checkFailed = true
	return false
}

func (m *deviceModel) activities(env *testsuite.TestWorkflowEnvironment) {
	registerActivitiesWith(env, m.history)
	acquire := func(ctx context.Context, in remediation.PermitInput) (breaker.PermitResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.acting(env, activity.GetInfo(ctx).Attempt)
		m.note("AcquirePermit %s open=%v", in.Action, m.breakerOpen)
		if in.Action == decide.Quarantined {
			m.causes.fenced()
		}
		if m.breakerOpen {
			return breaker.PermitResult{Reason: "circuit breaker open: simulated"}, nil
		}
		if breaker.OwnBudget(in.Action) {
			if in.Action == breaker.Reset {
				hold := in.Hold
				if hold <= 0 {
					hold = breaker.DefaultResetHold
				}
				m.resetUntil = env.Now().Add(hold)
			}
			m.resetPermits++
			m.lastPermit = in.Action
			m.ladder.permit(in.Action)
			return breaker.PermitResult{Granted: true}, nil
		}
		m.permits++
		return breaker.PermitResult{Granted: true}, nil
	}
	quarantine := func(ctx context.Context, in remediation.QuarantineInput) (remediation.QuarantineResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		attempt := activity.GetInfo(ctx).Attempt
		m.acting(env, attempt)
		// A retried quarantine that succeeds goes on with its decision (the ladder's first step),
		// made before any report that arrived while it was retried.
		defer func() {
			if attempt > 1 && m.rule != nil {
				m.followOnAt = env.Now()
			}
		}()
		if m.quarantineFatal {
			m.quarantineFatal, m.quarantineFaulted = false, true
			return remediation.QuarantineResult{}, temporal.NewNonRetryableApplicationError("rule name taken", remediation.ErrRuleNameCollision, nil)
		}
		if m.quarantineFails > 1 {
			m.quarantineFails--
			m.quarantineFaulted = true
			return remediation.QuarantineResult{}, errors.New("apiserver unavailable")
		}
		if len(in.Members) > 0 {
			return m.quarantineUnit(in)
		}
		if m.unit != nil {
			m.violate("the unit's ID %s fenced as a device (no forms): its rule would select no device", in.Device)
		}
		name := in.Device.TaintRuleName()
		m.names[name] = true
		m.note("Quarantine %s by %q effect %s: %s", in.Decision, in.Actor, in.Effect, in.Reason)
		// A new automatic fence (a rule where there was none, or a stronger one) needs a permit; the
		// same rule made again (a retried or re-run activity) does not.
		if m.newFence(in.Decision) {
			m.ladder.fence(in.Decision)
		}
		if in.Decision == string(decide.Quarantined) {
			m.causes.fenced()
		}
		// A fence put back (a retired device's rule deleted by hand: no Decision) is no new one.
		if in.Actor != simActor && in.Decision != "" && (m.rule == nil || m.rule.Decision != in.Decision) {
			m.automatic++
			if m.automatic > m.permits {
				m.violate("an automatic %s taint without a granted permit (%d new fences, %d permits)", in.Decision, m.automatic, m.permits)
			}
		}
		if in.Decision == string(decide.Quarantined) && !m.unhealthySeen && !m.forced && !m.checkFailed {
			m.violate("quarantined with no Unhealthy report, no force-quarantine and no failed check: Unknown is not Unhealthy")
		}
		if m.rule == nil {
			m.probeOK, m.canaryOK = nil, nil
			m.ladder.quarantined()
		}
		rule := in
		rule.Key = decide.TaintQuarantine // what Quarantine writes; a refresh may make it probation
		m.rule = &rule
		if m.quarantineFails == 1 {
			m.quarantineFails, m.lostFence = 0, in.Decision
			m.note("  (result lost)")
			return remediation.QuarantineResult{}, errors.New("connection reset after the write")
		}
		return remediation.QuarantineResult{RuleName: name, Created: true, Effect: string(in.Effect)}, nil
	}
	env.OnActivity("AcquirePermit", mock.Anything, mock.Anything).Return(acquire).Maybe()
	env.OnActivity("Quarantine", mock.Anything, mock.Anything).Return(quarantine).Maybe()
	// New runs take the permit and make the rule in one local activity: the model's two, in turn.
	env.OnActivity("QuarantineWithPermit", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in remediation.QuarantineWithPermitInput) (remediation.QuarantineWithPermitResult, error) {
			permit, err := acquire(ctx, in.Permit)
			if err != nil || !permit.Granted {
				return remediation.QuarantineWithPermitResult{Permit: permit}, err
			}
			rule, err := quarantine(ctx, in.Quarantine)
			if err != nil {
				return remediation.QuarantineWithPermitResult{}, err
			}
			return remediation.QuarantineWithPermitResult{Permit: permit, Rule: rule}, nil
		}).Maybe()
	env.OnActivity("InspectRule", mock.Anything, mock.Anything).Return(func(_ context.Context, in remediation.InspectInput) (decide.RuleInfo, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(in.Members) > 0 {
			return m.inspectUnit(in), nil
		}
		if m.rule == nil {
			return decide.RuleInfo{Name: in.Device.TaintRuleName()}, nil
		}
		return decide.RuleInfo{Present: true, Name: in.Device.TaintRuleName(), Key: m.rule.Key, Effect: string(m.rule.Effect), WantEffect: string(in.Effect)}, nil
	}).Maybe()
	env.OnActivity("RefreshRule", mock.Anything, mock.Anything).Return(func(_ context.Context, in remediation.QuarantineInput) (remediation.RefreshResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.note("RefreshRule present=%v", m.rule != nil)
		if len(in.Members) > 0 {
			return m.refreshUnit(in), nil
		}
		if m.rule == nil {
			return remediation.RefreshResult{Missing: true}, nil
		}
		m.rule.ExpiresAt, m.rule.Effect = in.ExpiresAt, in.Effect
		if in.Key != "" {
			m.rule.Key = in.Key
		}
		return remediation.RefreshResult{Effect: string(in.Effect)}, nil
	}).Maybe()
	env.OnActivity("RunCheck", mock.Anything, mock.Anything).Return(func(ctx context.Context, in remediation.CheckInput) (decide.StepResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if res, ended := m.checkNotRun(env, activity.GetInfo(ctx).Attempt, in); ended {
			return res, nil
		}
		ok := m.checkPasses()
		m.note("RunCheck %s passed=%v", in.Kind, ok)
		if in.Kind == decide.ActRepair {
			// A reset may run its whole timeout: its permit holds its place in the budget
			// (and counts its failure) until then.
			if end := env.Now().Add(m.resetTimeout); end.After(m.resetUntil) {
				m.violate("a reset that may run %s until %s holds its permit only until %s: another reset starts beside it past the budget, and its failure is not counted",
					m.resetTimeout, end.Format("15:04:05"), m.resetUntil.Format("15:04:05"))
			}
			// Aimed at approvals, every reset fails: each quarantine climbs to its node step's ask.
			return m.repairStep(env, activity.GetInfo(ctx).Attempt, breaker.Reset, ok && !m.aimed), nil
		}
		if m.retired && in.Kind == decide.ActProbe && (!m.releaseAsked || m.askedAt.Before(m.retiredAt)) {
			m.violate("a retired device was probed without a person's release")
		}
		if m.probeFails > 0 && ok {
			m.probeFails--
			ok, m.checkFailed = false, true
		}
		if !ok {
			m.ladder.passed = false // the review found the device still broken
		}
		if in.Kind == decide.ActProbe {
			m.probeOK = &ok
		} else {
			m.canaryOK = &ok
		}
		if !ok {
			return decide.StepResult{Reason: "exit 1"}, nil
		}
		return decide.StepResult{Passed: true, Reason: "exit 0"}, nil
	}).Maybe()
	env.OnActivity("RemediateNode", mock.Anything, mock.Anything).Return(func(ctx context.Context, in remediation.NodeInput) (decide.StepResult, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		attempt := activity.GetInfo(ctx).Attempt // a retried attempt is the decision it was made for
		if err := m.ladder.nodeFailed(attempt); err != nil {
			m.acting(env, attempt)
			m.note("RemediateNode failed: %v", err)
			// A step that fails outright gave no verdict on the device: it did not run.
			return decide.StepResult{}, err
		}
		if in.Step.Holders == policy.HoldersMove && m.nodeHolders > 0 {
			if m.holdersFound && !m.moveAsked {
				m.violate("a node step looked again without the holders it found being moved")
			}
			last, passed := m.ladder.last, m.ladder.passed // moving holders is not the step's result
			if res := m.repairStep(env, attempt, breaker.Reboot, true); res.Busy {
				m.ladder.nodeStepEnded(res)
				return res, nil
			}
			m.ladder.last, m.ladder.passed = last, passed
			m.holdersFound, m.moveAsked = true, false
			m.ladder.fenced = true // the activity fences the node and keeps its permit
			m.note("RemediateNode: %d holders on the node, moved first", m.nodeHolders)
			return decide.StepResult{Busy: true, Reason: "node node-1 still runs Pods", Holders: []string{fmt.Sprintf("team/holder-%d", m.nodeHolders)}}, nil
		}
		if in.Step.Holders == policy.HoldersMove && m.holdersFound && !m.moveAsked {
			m.violate("a node step rebooted without the holders it found being moved")
		}
		ok := m.checkPasses()
		m.note("RemediateNode passed=%v", ok)
		res := m.repairStep(env, attempt, breaker.Reboot, ok)
		m.ladder.nodeStepEnded(res)
		return res, nil
	}).Maybe()
	env.OnActivity("ReleaseRule", mock.Anything, mock.Anything).Return(func(ctx context.Context, in remediation.ReleaseInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.releaseFails > 1 {
			m.releaseFails--
			return errors.New("apiserver unavailable")
		}
		m.note("ReleaseRule by %q: %s", in.Actor, in.Reason)
		m.acting(env, activity.GetInfo(ctx).Attempt)
		if m.sourcesClearAt.Before(m.sourcesFaultAt) && m.sourcesFaultAt.Before(m.actingAt) {
			m.violate("released while its sources still reported the fault (since %s, acting %s)", m.sourcesFaultAt.Format("15:04:05.000"), m.actingAt.Format("15:04:05.000"))
		}
		if m.moveHolders && !in.NodeFence {
			m.violate("a release of a device whose ladder fences its node does not take its fences")
		}
		if in.NodeFence {
			m.ladder.fenced, m.ladder.nodePermit = false, false // ReleaseRule lifts them
		}
		if m.retired && in.Actor == decide.Actor {
			m.violate("a retired device was released with no person's approval")
		}
		m.ladder.released(m, in)
		m.retired, m.releaseAsked = false, false
		if (m.probeOK != nil && !*m.probeOK) || (m.canaryOK != nil && !*m.canaryOK) {
			m.violate("rule released while the last probe or canary failed (probe %v, canary %v)", ptrBool(m.probeOK), ptrBool(m.canaryOK))
		}
		m.rule = nil
		if m.unit != nil {
			m.releaseUnit(in)
		}
		if m.releaseFails == 1 {
			m.releaseFails = 0
			m.note("  (result lost)")
			return errors.New("connection reset after the delete")
		}
		return nil
	}).Maybe()
	env.OnActivity("RecordRetirement", mock.Anything, mock.Anything).Return(func(_ context.Context, in remediation.RetireInput) (string, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.note("RecordRetirement: %s", in.Reason)
		m.ladder.retired(m, in.Reason)
		m.retired, m.retiredAt = true, env.Now()
		return "evidence", nil
	}).Maybe()
	env.OnActivity("RequestApproval", mock.Anything, mock.Anything).Return(func(_ context.Context, in notify.ApprovalRequest) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if in.Step != "" {
			m.note("RequestApproval of step %s (%s)", in.Step, in.Review)
			m.stepAskedAt = env.Now()
		}
		m.ladder.asked(in, env.Now())
		return nil
	}).Maybe()
	m.ladder.activities(env, m)
	m.causes.activities(env, m)
	for _, name := range []string{"Alert", "ReportNodeFailure"} {
		env.OnActivity(name, mock.Anything, mock.Anything).Return(nil).Maybe()
	}
	env.OnActivity("FindWorkloads", mock.Anything, mock.Anything).Return(func(_ context.Context, in migration.FindWorkloadsInput) ([]api.Workload, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, p := range in.Pods {
			if p.Namespace == "team" && m.nodeHolders > 0 {
				m.moveAsked = true
				m.nodeHolders--
				break
			}
		}
		return nil, nil
	}).Maybe()
}

func ptrBool(b *bool) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprint(*b)
}

// simActor is the operator of the simulations' commands.
const simActor = "ops"

// deviceSteps draws a sequence of what a device workflow can see.
func deviceSteps(rt *rapid.T, m *deviceModel) []step {
	id := gpu0
	kinds := []string{"observe", "observe", "observe", "command", "breaker", "fault", "wake", "continue-as-new"}
	if m.unit == nil {
		kinds = append(kinds, "delete-rule", "old-button", "report-and-approve")
	}
	if m.aimed {
		kinds = []string{"observe", "observe", "observe", "fault", "old-button", "old-button", "report-and-approve", "report-and-approve", "command", "command", "wake"}
	}
	if m.unit != nil {
		id = m.unit.Device()
		kinds = append(kinds, "reconfigure", "lose-rule")
	}
	if m.leaders {
		kinds = append(kinds, "detector-word", "detector-word", "leader-resend", "leader-resend")
	}
	n := rapid.IntRange(1, 40).Draw(rt, "steps")
	var steps []step
	tl := &timeline{at: time.Second} // the run has started
	ver := 10
	canStand := false // a standing detector's fault follows a fault, as the watcher withdraws it
	term := int64(1)
	var seq uint64
	for i := range n {
		gap := rapid.SampledFrom([]time.Duration{0, time.Second, 30 * time.Second, 2 * time.Minute, 6 * time.Minute, 20 * time.Minute}).Draw(rt, fmt.Sprintf("gap%d", i))
		kind := rapid.SampledFrom(kinds).Draw(rt, fmt.Sprintf("kind%d", i))
		s := step{at: tl.next(gap)}
		switch kind {
		case "observe":
			h := rapid.SampledFrom([]device.Health{device.Healthy, device.Unknown, device.Unhealthy}).Draw(rt, fmt.Sprintf("health%d", i))
			ver += rapid.IntRange(-2, 2).Draw(rt, fmt.Sprintf("ver%d", i)) // stale, duplicate or newer
			newLeader := rapid.IntRange(0, 9).Draw(rt, fmt.Sprintf("term%d", i)) == 0
			if newLeader {
				term++
			}
			// A new leader sends before its Prometheus answered: it knows nothing that stands.
			unread := newLeader && rapid.Bool().Draw(rt, fmt.Sprintf("unread%d", i))
			seq++
			src := rapid.SampledFrom([]decide.Source{decide.SourcePodStatus, decide.SourcePodStatus, decide.SourceSlice, decide.SourceClaimCondition}).Draw(rt, fmt.Sprintf("src%d", i))
			idle := rapid.IntRange(0, 5).Draw(rt, fmt.Sprintf("idle%d", i)) == 0
			if m.aimed {
				h = rapid.SampledFrom([]device.Health{device.Healthy, device.Unhealthy, device.Unhealthy}).Draw(rt, fmt.Sprintf("aimedHealth%d", i))
				idle = rapid.Bool().Draw(rt, fmt.Sprintf("aimedIdle%d", i))
			}
			byUpdate := rapid.Bool().Draw(rt, fmt.Sprintf("byUpdate%d", i))
			o := decide.Observation{Device: id, Node: "node-1", Health: h, StatusVersion: fmt.Sprint(ver), Source: src,
				Seq: &decide.Seq{Term: term, N: seq}, ObservedAt: time.Unix(1700000000, 0)}
			if h == device.Unhealthy {
				o.Cause = m.causes.draw(rt, i)
			}
			if canStand && rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("standing%d", i)) > 0 {
				o.Standing = []string{"dcgm: recovery-action:2"}
			}
			if unread {
				o.Standing, o.StandingUnread = nil, true
			} else {
				canStand = h == device.Unhealthy || len(o.Standing) > 0
			}
			if !idle {
				o.Reporters = []decide.Reporter{{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: h}}
			}
			s.what = fmt.Sprintf("observe %s v%d term %d src %q idle %v update %v standing %v", h, ver, term, src, idle, byUpdate, o.Standing)
			if unread {
				s.what += " (standing unread)"
			}
			if o.Cause != nil {
				s.what += ", cause " + o.Cause.String()
			}
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				o.ObservedAt = env.Now() // the watcher stamps what it saw when it saw it
				m.mu.Lock()
				m.causes.observed(o.Cause, o.Standing, env.Now())
				if h == device.Unhealthy {
					m.unhealthySeen = true
				}
				// held is the world's truth, sent or not; heldAt and idleAt are when the workflow was
				// told: an update its ending run never took is sent again by the watcher.
				m.held = !idle
				told := func() {
					m.reported = true
					// Unread, what stood still stands; and an older report taken late (an update
					// the workflow took after a newer signal) is no word on what stands now.
					if !o.StandingUnread && !o.Seq.Before(m.standingSeq) {
						m.standing, m.standingSeq = len(o.Standing) > 0, *o.Seq
					}
					m.sourcesSay(*o.Seq, h, env.Now())
					if idle {
						m.idleAt = env.Now()
					} else {
						m.heldAt = env.Now()
					}
				}
				if !byUpdate {
					told()
				}
				if m.unit != nil {
					// What the watcher sends: the forms published when it looks.
					u := *m.unit
					u.Devices = slices.Clone(m.unit.Devices)
					o.Unit = &u
				}
				m.mu.Unlock()
				if byUpdate {
					u := &simUpdate{what: s.what}
					m.mu.Lock()
					m.updates = append(m.updates, u)
					m.mu.Unlock()
					sendUpdate(env, api.UpdateObservation, o, u, func() { m.mu.Lock(); told(); m.mu.Unlock() }, nil)
				} else {
					m.signal(env, api.SignalObservation, o)
				}
			}
		case "command":
			c := rapid.SampledFrom(decide.Commands).Draw(rt, fmt.Sprintf("cmd%d", i))
			if m.aimed {
				c = rapid.SampledFrom([]decide.CommandKind{decide.CmdApprove, decide.CmdReleaseApproval, decide.CmdRelease, decide.CmdRelease, decide.CmdReject}).Draw(rt, fmt.Sprintf("aimedCmd%d", i))
			}
			actor := rapid.SampledFrom([]string{simActor, simActor, simActor, ""}).Draw(rt, fmt.Sprintf("actor%d", i))
			how := rapid.SampledFrom([]string{"update", "update", "signal", "junk"}).Draw(rt, fmt.Sprintf("how%d", i))
			cmd := decide.Command{Kind: c, Actor: actor, Reason: "simulated"}
			older := rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("older%d", i)) // approve naming an earlier ask
			if c == decide.CmdExtend || c == decide.CmdPause {
				cmd.Duration = policy.JSONDuration(rapid.SampledFrom([]time.Duration{0, time.Hour}).Draw(rt, fmt.Sprintf("dur%d", i)))
			}
			s.what = fmt.Sprintf("%s %s by %q", how, c, actor)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				if c == decide.CmdForceQuarantine {
					m.forced = true
				}
				if (c == decide.CmdApprove && how == "update" || c == decide.CmdReleaseApproval && how != "junk") && actor != "" {
					m.approvedAt = env.Now()
					cmd.Review = m.ladder.approving(older, env.Now())
				}
				if c == decide.CmdRelease && how != "junk" && actor != "" {
					// A person asked: a device retired before the command arrived may be reviewed
					// (one sent in the same instant may reach the workflow after the retirement).
					m.releaseAsked, m.askedAt = true, env.Now()
				}
				m.mu.Unlock()
				switch how {
				case "update":
					m.update(env, string(c), s.what, cmd)
				case "signal":
					if c != decide.CmdReject && c != decide.CmdApprove {
						m.signal(env, string(c), cmd)
					}
				case "junk":
					m.signal(env, api.SignalPause, "not a command")
				}
			}
		case "breaker":
			open := rapid.Bool().Draw(rt, fmt.Sprintf("open%d", i))
			s.what = fmt.Sprintf("breaker open %v", open)
			s.do = func(*testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				defer m.mu.Unlock()
				m.breakerOpen = open
			}
		case "fault":
			faults := []string{"quarantine", "quarantine-fatal", "check", "probe", "release", "node"}
			if m.tooling {
				faults = append(faults, "not-run", "not-run")
			}
			f := rapid.SampledFrom(faults).Draw(rt, fmt.Sprintf("fault%d", i))
			if m.aimed {
				f = "check" // resets that fail: the ladder climbs to its node step's ask
			}
			k := rapid.IntRange(1, 3).Draw(rt, fmt.Sprintf("faults%d", i))
			s.what = fmt.Sprintf("next %d %s calls fail", k, f)
			s.do = func(*testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				defer m.mu.Unlock()
				switch f {
				case "quarantine":
					m.quarantineFails = k
				case "quarantine-fatal":
					m.quarantineFatal = true
				case "check":
					m.checkFails = k
				case "probe":
					m.probeFails = k
				case "release":
					m.releaseFails = k
				case "node":
					m.ladder.nodeFails = k
				case "not-run":
					m.notRuns = k
				}
			}
		case "wake":
			s.what = "breaker wake"
			s.do = func(env *testsuite.TestWorkflowEnvironment) { m.signal(env, api.SignalBreakerWake, nil) }
		case "continue-as-new":
			s = continueAsNewStep(tl)
		case "delete-rule":
			s.what = "a person deletes the device's rule, and a Pod reports the device Unhealthy"
			ver++
			seq++
			o := decide.Observation{Device: id, Node: "node-1", Health: device.Unhealthy, StatusVersion: fmt.Sprint(ver),
				Seq: &decide.Seq{Term: term, N: seq}, ObservedAt: time.Unix(1700000000, 0),
				Reporters: []decide.Reporter{{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: device.Unhealthy}}}
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				o.ObservedAt = env.Now()
				m.mu.Lock()
				m.rule, m.unhealthySeen, m.held = nil, true, true
				m.heldAt, m.reported = env.Now(), true
				m.standing, m.standingSeq = false, *o.Seq // a read observation that says nothing stands
				m.mu.Unlock()
				m.signal(env, api.SignalObservation, o)
			}
		case "old-button":
			// A person clicks an Approve button left from an earlier ask (of this quarantine or
			// one before it).
			back := rapid.IntRange(1, 4).Draw(rt, fmt.Sprintf("back%d", i))
			s.what = fmt.Sprintf("approve with the button of the ask %d back", back)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				m.mu.Lock()
				cmd := decide.Command{Kind: decide.CmdApprove, Actor: simActor, Review: m.ladder.approving(back, env.Now())}
				if cmd.Review == "" {
					m.mu.Unlock()
					return
				}
				m.approvedAt = env.Now()
				m.mu.Unlock()
				m.update(env, string(decide.CmdApprove), s.what, cmd)
			}
		case "report-and-approve":
			// The driver reports the device Unhealthy as a person approves what waits: the
			// approval may reach the workflow while the report's decisions run.
			ver++
			seq++
			o := decide.Observation{Device: id, Node: "node-1", Health: device.Unhealthy, StatusVersion: fmt.Sprint(ver), Source: decide.SourceSlice,
				Seq: &decide.Seq{Term: term, N: seq}, ObservedAt: time.Unix(1700000000, 0)}
			kind, older := decide.CmdApprove, -1
			if m.aimed {
				// The release review's button, or a bare approval bound to what waits when taken.
				kind = rapid.SampledFrom([]decide.CommandKind{decide.CmdApprove, decide.CmdReleaseApproval}).Draw(rt, fmt.Sprintf("aimedKind%d", i))
				older = rapid.SampledFrom([]int{-1, 0}).Draw(rt, fmt.Sprintf("aimedOlder%d", i))
			}
			s.what = fmt.Sprintf("the driver reports Unhealthy (idle) and a person sends %s (ask %d)", kind, older)
			s.do = func(env *testsuite.TestWorkflowEnvironment) {
				o.ObservedAt = env.Now()
				m.mu.Lock()
				m.unhealthySeen, m.held = true, false
				m.idleAt, m.reported = env.Now(), true
				m.approvedAt = env.Now()
				m.standing, m.standingSeq = false, *o.Seq // a read observation that says nothing stands
				cmd := decide.Command{Kind: kind, Actor: simActor, Review: m.ladder.approving(older, env.Now())}
				m.mu.Unlock()
				m.signal(env, api.SignalObservation, o)
				m.update(env, string(kind), s.what, cmd)
			}
		case "detector-word":
			ver++
			seq++
			s = m.wordStep(id, i, ver, term, seq, s)
		case "leader-resend":
			ver++
			term++
			seq++
			s = m.resendStep(ver, term, seq, s)
		default:
			s = m.unitStep(rt, i, s)
		}
		steps = append(steps, s)
	}
	return steps
}

// update sends an update and records how it is answered.
func (m *deviceModel) update(env *testsuite.TestWorkflowEnvironment, name, what string, arg any) {
	u := &simUpdate{what: what}
	m.updates = append(m.updates, u)
	sendUpdate(env, name, arg, u, nil, nil)
}

// checkDevice holds the device workflow's state to the model after a step.
func (m *deviceModel) checkDevice(env *testsuite.TestWorkflowEnvironment, after string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stepped(env, after)
	var st decide.DeviceState
	if !m.look(env, after, &st) {
		m.ladder.check(m, after, decide.Released) // an idle device's run ends out of quarantine
		return                                    // (an idle device's run that ended: the watcher's next report starts another)
	}
	if len(m.names) > 1 {
		m.violate("after %s: %d rule names for one device: %v", after, len(m.names), m.names)
	}
	if m.unit != nil {
		m.checkUnit(after, &st)
	}
	m.ladder.check(m, after, st.State)
	m.checkNoVerdicts(after, &st)
	m.causes.check(m, after, &st)
	m.checkResent(env, after, &st)
	m.checkRefusals(m.updates)
}

// TestSimulateDeviceWorkflow runs generated sequences of observations (every health, stale and
// duplicate versions, new leaders' terms, driver and Pod sources, idle reports), operator commands
// (as updates and signals, valid, refused, unsigned and malformed), breaker answers, failing
// activities, breaker wake-ups and continue-as-new through the device workflow, holding it after
// every step to: one rule name per device; no automatic taint without a granted permit; Unknown
// never quarantines by itself; a rule is released only after a passed probe and canary; the state
// query answers; every update is answered, and every refusal says why.
func TestSimulateDeviceWorkflow(t *testing.T) { simulate(t, 300, deviceProperty) }

// deviceProperty is one generated sequence through the device workflow, held to its invariants.
func deviceProperty(rt *rapid.T) { runDevice(rt, nil, simMode{}) }

// TestSimulateDeviceApprovals runs sequences aimed at the node step's approvals: every
// quarantine's ladder ends in a node step a person must approve, resets fail often, and people
// answer with the newest ask's button, an older one, or none, beside the driver's reports. The
// device workflow's invariants hold, among them that an approval is applied only to the ask it names.
func TestSimulateDeviceApprovals(t *testing.T) { simulate(t, 200, approvalsProperty) }

func approvalsProperty(rt *rapid.T) { runDevice(rt, nil, simMode{aimed: true}) }

// simMode is what a device simulation aims at beside the device's own moves: the node step's
// approvals (aimed), new leaders and detectors' words (leaders), checks and steps that do not run
// (tooling). Each adds draws of its own, so a sequence recorded in another mode replays as it was.
type simMode struct{ aimed, leaders, tooling bool }

// runDevice runs one generated sequence; with a unit, the workflow is that unit's (sim_unit_test.go).
func runDevice(rt *rapid.T, unit *device.Unit, mode simMode) {
	aimed := mode.aimed
	{
		m := &deviceModel{names: map[string]bool{}, unit: unit, forms: map[string]bool{}, aimed: aimed, leaders: mode.leaders, tooling: mode.tooling, history: newHistoryStore()}
		steps := deviceSteps(rt, m)
		id := gpu0
		if unit != nil {
			id = unit.Device()
		}
		p := policy.Default()
		p.ToleranceWindow = policy.JSONDuration(rapid.SampledFrom([]time.Duration{time.Minute, 5 * time.Minute}).Draw(rt, "tolerance"))
		p.QuarantineLease = policy.JSONDuration(rapid.SampledFrom([]time.Duration{10 * time.Minute, time.Hour}).Draw(rt, "lease"))
		p.StabilityWindow = policy.JSONDuration(time.Minute)
		p.ApprovalRequired = aimed || rapid.Bool().Draw(rt, "approval")
		p.ApprovalTimeout = policy.JSONDuration(30 * time.Minute)
		p.Causes.ApplicationFaults = policy.Threshold{Limit: rapid.IntRange(1, 3).Draw(rt, "appFaults"), Window: policy.JSONDuration(time.Hour)}
		m.causes.causes = p.Causes
		if aimed || rapid.Bool().Draw(rt, "ladder") {
			m.ladder.retireAfter = rapid.SampledFrom([]int{0, 2}).Draw(rt, "retireAfter")
			m.resetTimeout = time.Minute
			if aimed {
				// Resets longer than the breaker's default hold (15 minutes) in the aimed runs,
				// whose draws no recorded sequence replays.
				m.resetTimeout = rapid.SampledFrom([]time.Duration{time.Minute, 40 * time.Minute}).Draw(rt, "resetTimeout")
			}
			p.Repair = policy.Repair{RetireAfter: m.ladder.retireAfter,
				Steps: []policy.RepairStep{{Kind: policy.RepairReset, Attempts: rapid.IntRange(1, 2).Draw(rt, "attempts"),
					Check: policy.Check{Image: "reset", Command: []string{"reset"}, Timeout: policy.JSONDuration(m.resetTimeout)}}}}
			if aimed || rapid.Bool().Draw(rt, "nodeStep") {
				m.stepApproval = aimed || rapid.Bool().Draw(rt, "stepApproval")
				holders := policy.HoldersWait
				if m.moveHolders = !aimed && rapid.Bool().Draw(rt, "moveHolders"); m.moveHolders {
					holders, m.nodeHolders = policy.HoldersMove, rapid.IntRange(0, 4).Draw(rt, "nodeHolders")
					p.Migration.Enabled = true
				}
				p.Repair.Steps = append(p.Repair.Steps, policy.RepairStep{Kind: policy.RepairNode, Attempts: 1, Holders: holders, Approval: m.stepApproval,
					Check: policy.Check{Timeout: policy.JSONDuration(10 * time.Minute)}, Template: `{"apiVersion": "r.example.com/v1", "kind": "Reboot"}`})
			}
			for _, st := range p.Repair.Steps {
				m.ladder.kinds = append(m.ladder.kinds, st.Kind)
			}
		}
		end := steps[len(steps)-1].at + time.Hour
		m.ended = func(*testsuite.TestWorkflowEnvironment) {
			// An idle device's run ended: the next run starts knowing no report.
			m.mu.Lock()
			m.sourcesFaultAt, m.sourcesClearAt, m.standing, m.healthSeq, m.health = time.Time{}, time.Time{}, false, decide.Seq{}, ""
			m.mu.Unlock()
		}
		err := segments(rt, &m.carrier, DeviceWorkflow, api.DeviceInput{Device: id, Node: "node-1", Policy: p}, true, end, steps, quietEnv(m.activities), m.checkDevice)
		// An activity the environment still retries after the run ended may touch the model: the
		// end is judged under its lock.
		m.mu.Lock()
		defer m.mu.Unlock()
		if err != nil {
			m.violate("the workflow failed: %v", err)
		}
		m.checkAnswered(m.updates)
		m.fail(rt)
	}
}
