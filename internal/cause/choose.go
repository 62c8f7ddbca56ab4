package cause

import (
	"fmt"
	"slices"
	"strings"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// Choice is the step a fault starts at, and why.
type Choice struct {
	First policy.First `json:"first"`
	// ThenRetire: the device is retired if that first step fails.
	ThenRetire bool `json:"thenRetire,omitempty"`
	// Why names what decided: "policy rule: xid 79", "recovery action node-reboot",
	// "catalogue: xid 13", "unknown cause".
	Why string `json:"why"`
}

// Choose is the first step for a fault of cause c under the policy's causes: the policy's own
// rules first; then the driver's recovery action, which wins over the XID table; then the
// detector's recommended action; then the shipped catalogue by code and XID. An unknown cause
// climbs the ladder as it stands.
func Choose(c Cause, p policy.Causes) Choice { return ChooseFrom(c, p, policy.Catalogue) }

// ChooseFrom is Choose with a given shipped catalogue (runs recorded before a change of it
// decide by the one they had).
func ChooseFrom(c Cause, p policy.Causes, catalogue []policy.CauseRule) Choice {
	if p.Off {
		return Choice{First: policy.FirstLadder, Why: "causes are off in the policy"}
	}
	if ch, ok := byRules(c, p.Rules, "policy rule"); ok {
		return ch
	}
	if f, ok := byRecovery(c.Recovery); ok {
		return Choice{First: f, Why: "recovery action " + string(c.Recovery)}
	}
	if ch, ok := byRules(Cause{Action: c.Action}, catalogue, "catalogue"); ok {
		return ch // the detector saw this fault: its word is more specific than the table's
	}
	if ch, ok := byRules(c, catalogue, "catalogue"); ok {
		return ch
	}
	return Choice{First: policy.FirstLadder, Why: "unknown cause"}
}

// Rank orders causes for the one an observation names when a device has several pending: what
// the shipped catalogue says the device needs, most first (retire, a node step, a reset, an unknown
// cause), an application's fault last, so an application's XID never masks the device's.
func Rank(c Cause) int {
	switch Choose(c, policy.Causes{}).First {
	case policy.FirstRetire:
		return 4
	case policy.FirstNode:
		return 3
	case policy.FirstReset:
		return 2
	case policy.FirstNone:
		return 0
	}
	return 1
}

// byRules is the first rule naming c's code, then its XID, then its recommended action.
func byRules(c Cause, rules []policy.CauseRule, from string) (Choice, bool) {
	name, _, _ := strings.Cut(c.Code, ":")
	for _, try := range []struct {
		what  string
		match func(policy.CauseRule) bool
	}{
		{"code " + c.Code, func(r policy.CauseRule) bool {
			return c.Code != "" && (slices.Contains(r.Codes, c.Code) || slices.Contains(r.Codes, name))
		}},
		{fmt.Sprintf("xid %d", c.XID), func(r policy.CauseRule) bool { return c.XID > 0 && slices.Contains(r.XIDs, c.XID) }},
		{"action " + c.Action, func(r policy.CauseRule) bool { return c.Action != "" && slices.Contains(r.Actions, c.Action) }},
	} {
		for _, r := range rules {
			if try.match(r) {
				return Choice{First: r.First, ThenRetire: r.ThenRetire, Why: from + ": " + try.what}, true
			}
		}
	}
	return Choice{}, false
}

// byRecovery is the step the driver's recovery action asks for.
func byRecovery(r Recovery) (policy.First, bool) {
	switch r {
	case RecoveryNone:
		return policy.FirstNone, true
	case RecoveryGPUReset, RecoveryDrainP2P, RecoveryDrainAndReset, RecoveryBusReset:
		return policy.FirstReset, true
	case RecoveryNodeReboot, RecoverySystemReboot:
		return policy.FirstNode, true
	}
	return "", false
}
