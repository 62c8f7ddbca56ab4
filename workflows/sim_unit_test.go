package workflows

import (
	"fmt"
	"slices"
	"testing"

	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// The device simulation in unit mode: the workflow is a partitionable GPU's, its observations
// carry the forms published now, the driver reconfigures (a form published or withdrawn), and
// someone deletes one form's rule by hand. The model keeps a rule per form.

// TestSimulateUnitWorkflow runs the device simulation for a physical unit, holding it, beside the
// device invariants, to: one permit per new fence however many forms it covers; every form the
// workflow knows of fenced while it is fenced (once no fault or hand-deleted rule is pending);
// a release that leaves no form's rule behind.
func TestSimulateUnitWorkflow(t *testing.T) { simulate(t, 300, unitProperty) }

func unitProperty(rt *rapid.T) {
	runDevice(rt, &device.Unit{ID: device.UnitID{Driver: gpu0.Driver, Pool: gpu0.Pool, Key: "counters=gpu-0-counters"},
		Devices: []string{"gpu-0", "gpu-0-mig-a", "gpu-0-mig-b"}, Whole: "gpu-0"}, simMode{})
}

// unitStep draws a reconfiguration or a rule deleted by hand.
func (m *deviceModel) unitStep(rt *rapid.T, i int, s step) step {
	if rapid.Bool().Draw(rt, fmt.Sprintf("reconf%d", i)) {
		add := rapid.Bool().Draw(rt, fmt.Sprintf("add%d", i))
		s.what = fmt.Sprintf("driver reconfigures: add %v", add)
		s.do = func(*testsuite.TestWorkflowEnvironment) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if add {
				m.unit.Devices = append(m.unit.Devices, fmt.Sprintf("gpu-0-mig-x%d", len(m.unit.Devices)))
				slices.Sort(m.unit.Devices)
			} else if len(m.unit.Devices) > 2 {
				m.unit.Devices = m.unit.Devices[:len(m.unit.Devices)-1] // a partition withdrawn
			}
			m.note("  published %v", m.unit.Devices)
		}
		return s
	}
	k := rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("lose%d", i))
	s.what = fmt.Sprintf("someone deletes rule %d of the unit's", k)
	s.do = func(*testsuite.TestWorkflowEnvironment) {
		m.mu.Lock()
		defer m.mu.Unlock()
		var have []string
		for f := range m.forms {
			have = append(have, f)
		}
		slices.Sort(have)
		if len(have) > 0 {
			delete(m.forms, have[k%len(have)])
			m.lost = true
			m.note("  deleted the rule of %s", have[k%len(have)])
			if len(m.forms) == 0 {
				m.rule = nil // the fence is gone: the workflow records an operator release
			}
		}
	}
	return s
}

// quarantineUnit is Quarantine for a unit: a rule per member. A call with no decision extends a
// standing fence to more forms; it needs no permit of its own.
func (m *deviceModel) quarantineUnit(in remediation.QuarantineInput) (remediation.QuarantineResult, error) {
	m.note("Quarantine unit %s by %q effect %s forms %v", in.Decision, in.Actor, in.Effect, in.Members)
	if in.Device != m.unit.Device() {
		m.violate("quarantine of %s, want the unit %s", in.Device, m.unit.Device())
	}
	if in.Decision != "" {
		if m.newFence(in.Decision) {
			m.ladder.fence(in.Decision)
		}
		if in.Actor != simActor && (m.rule == nil || m.rule.Decision != in.Decision) {
			m.automatic++
			if m.automatic > m.permits {
				m.violate("an automatic %s of the unit without a granted permit (%d new fences, %d permits)", in.Decision, m.automatic, m.permits)
			}
		}
		if in.Decision == string(decide.Quarantined) && !m.unhealthySeen && !m.forced && !m.checkFailed {
			m.violate("quarantined with no Unhealthy report, no force-quarantine and no failed check: Unknown is not Unhealthy")
		}
	}
	if m.rule == nil {
		m.probeOK, m.canaryOK = nil, nil
	}
	rule := in
	if in.Decision == "" && m.rule != nil {
		rule.Decision = m.rule.Decision
	}
	rule.Key = in.Key
	if rule.Key == "" {
		rule.Key = decide.TaintQuarantine
	}
	m.rule = &rule
	for _, f := range in.Members {
		m.forms[f] = true
	}
	m.lost = false
	if m.quarantineFails == 1 {
		m.quarantineFails, m.quarantineFaulted = 0, true
		if in.Decision != "" {
			m.lostFence = in.Decision
		}
		m.note("  (result lost)")
		return remediation.QuarantineResult{}, fmt.Errorf("connection reset after the write")
	}
	name := m.unit.Device().TaintRuleName()
	m.names[name] = true
	return remediation.QuarantineResult{RuleName: name, Created: true, Effect: string(in.Effect)}, nil
}

// inspectUnit answers as InspectRule does for a unit: in force while any form's rule stands,
// naming the forms without one.
func (m *deviceModel) inspectUnit(in remediation.InspectInput) decide.RuleInfo {
	info := decide.RuleInfo{Name: in.Device.TaintRuleName(), WantEffect: in.Effect}
	var missing []string
	for _, f := range in.Members {
		if !m.forms[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) == len(in.Members) || m.rule == nil {
		return info
	}
	info.Present, info.Key, info.Effect, info.Missing = true, m.rule.Key, string(m.rule.Effect), missing
	return info
}

// refreshUnit rewrites the unit's rules and writes a missing form's; with none standing, the
// fence is gone.
func (m *deviceModel) refreshUnit(in remediation.QuarantineInput) remediation.RefreshResult {
	standing := false
	for _, f := range in.Members {
		standing = standing || m.forms[f]
	}
	if !standing || m.rule == nil {
		return remediation.RefreshResult{Missing: true}
	}
	for _, f := range in.Members {
		m.forms[f] = true
	}
	m.lost = false
	m.rule.ExpiresAt, m.rule.Effect = in.ExpiresAt, in.Effect
	if in.Key != "" {
		m.rule.Key = in.Key
	}
	return remediation.RefreshResult{Effect: string(in.Effect)}
}

// releaseUnit deletes every rule of the unit, as ReleaseRule does with a unit's members (the
// rule of a form no longer listed included); released as a device, the forms' rules would stay.
func (m *deviceModel) releaseUnit(in remediation.ReleaseInput) {
	if len(in.Members) == 0 {
		m.violate("the unit released as a device: the rules of %v stay", m.forms)
		return
	}
	clear(m.forms)
	m.lost = false
}

// checkUnit holds the unit's workflow to its forms after a step.
func (m *deviceModel) checkUnit(after string, st *decide.DeviceState) {
	if st.Unit == nil {
		return
	}
	fenced := st.Quarantine != nil && (st.State == decide.Quarantined || st.State == decide.Restricted || st.State == decide.Recovering)
	if !fenced || m.quarantineFaulted || m.lost || len(m.forms) == 0 {
		return
	}
	for _, f := range st.Unit.Devices {
		if !m.forms[f] {
			m.violate("after %s: %s is a form of the fenced unit (%v) and has no rule (rules: %v)", after, f, st.Unit.Devices, m.forms)
		}
	}
}
