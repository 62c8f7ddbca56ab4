package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// First names the step a fault of a cause starts at.
type First string

// The first steps a cause may choose.
const (
	// FirstNone: the application's own fault; the device is not fenced (counted, and fenced
	// when the count within the window reaches Causes.ApplicationFaults.Limit).
	FirstNone First = "none"
	// FirstReset and FirstNode start the ladder at its first step of that kind.
	FirstReset First = "reset"
	FirstNode  First = "node"
	// FirstRetire retires the device at once with the evidence: no step can help.
	FirstRetire First = "retire"
	// FirstLadder climbs the ladder from its first step (an unknown cause).
	FirstLadder First = "ladder"
)

// Firsts are the names a cause's first step may have.
var Firsts = []First{FirstNone, FirstReset, FirstNode, FirstRetire, FirstLadder}

// Causes says what a fault's cause changes: the first step per cause (the shipped catalogue,
// each entry of which the policy may override) and when application faults fence the device.
type Causes struct {
	// Off: every fault is fenced and climbs the ladder from its first step, whatever its cause.
	Off bool `json:"off,omitempty"`
	// Rules override the catalogue; the first rule naming a fault's code or XID decides.
	Rules []CauseRule `json:"rules,omitempty"`
	// ApplicationFaults: this many application faults within the window fence the device (a
	// bad GPU can hide behind application errors). Zero values take DefaultApplicationFaults.
	ApplicationFaults Threshold `json:"applicationFaults,omitzero"`
}

// DefaultApplicationFaults fences a device after 5 application faults within an hour.
var DefaultApplicationFaults = Threshold{Limit: 5, Window: JSONDuration(time.Hour)}

// AppFaultLimit is the threshold in force: the policy's, or the default for what it leaves out.
func (c Causes) AppFaultLimit() Threshold {
	t := c.ApplicationFaults
	if t.Limit == 0 {
		t.Limit = DefaultApplicationFaults.Limit
	}
	if t.Window == 0 {
		t.Window = DefaultApplicationFaults.Window
	}
	return t
}

// CauseRule gives the first step of the faults it names by XID, by code, or by the detector's
// recommended action.
type CauseRule struct {
	XIDs    []int    `json:"xids,omitempty"`
	Codes   []string `json:"codes,omitempty"`
	Actions []string `json:"actions,omitempty"`
	First   First    `json:"first"`
	// ThenRetire retires the device when the first step fails, instead of climbing on (XID 64:
	// a reset, then a replacement candidate).
	ThenRetire bool `json:"thenRetire,omitempty"`
}

// Threshold is a count within a window.
type Threshold struct {
	Limit  int          `json:"limit"`
	Window JSONDuration `json:"window"`
}

// Catalogue is the shipped table from cause to first step, after NVIDIA's XID catalogue (its
// immediate action), dcgm-exporter's fault series and NVSentinel's recommended actions. A policy's
// rules come before it.
var Catalogue = []CauseRule{
	{XIDs: []int{13, 31, 43, 63, 92, 94}, First: FirstNone},
	{XIDs: []int{64}, First: FirstReset, ThenRetire: true},
	{XIDs: []int{46, 48, 62, 95, 109, 119, 120, 136, 140, 143, 155, 156, 158}, First: FirstReset},
	{XIDs: []int{79}, First: FirstNode},
	// A row remap failure needs a replacement; an uncorrectable error whose row was remapped
	// needs a reset, which applies the pending remap (NVIDIA's GPU memory error management).
	{Codes: []string{"row-remap-failure"}, First: FirstRetire},
	{Codes: []string{"uncorrectable-remapped-rows"}, First: FirstReset},
	{Actions: []string{"RESTART_APP", "NONE"}, First: FirstNone},
	{Actions: []string{"COMPONENT_RESET"}, First: FirstReset},
	{Actions: []string{"RESTART_BM", "RESTART_VM"}, First: FirstNode},
	{Actions: []string{"REPLACE_VM"}, First: FirstRetire},
}

// causesEntry is the policy file's `causes:` block.
type causesEntry struct {
	Off               *bool            `yaml:"off"`
	Rules             []causeRuleEntry `yaml:"rules"`
	ApplicationFaults *thresholdEntry  `yaml:"applicationFaults"`
}

type causeRuleEntry struct {
	XIDs       []int    `yaml:"xids"`
	Codes      []string `yaml:"codes"`
	Actions    []string `yaml:"actions"`
	First      string   `yaml:"first"`
	ThenRetire bool     `yaml:"thenRetire"`
}

type thresholdEntry struct {
	Limit  *int      `yaml:"limit"`
	Window *Duration `yaml:"window"`
}

func (c *causesEntry) apply(dst *Causes) {
	if c == nil {
		return
	}
	if c.Off != nil {
		dst.Off = *c.Off
	}
	if c.Rules != nil {
		dst.Rules = nil
		for _, r := range c.Rules {
			actions := make([]string, 0, len(r.Actions))
			for _, a := range r.Actions {
				actions = append(actions, strings.ToUpper(strings.TrimSpace(a)))
			}
			dst.Rules = append(dst.Rules, CauseRule{XIDs: r.XIDs, Codes: r.Codes, Actions: actions, First: First(r.First), ThenRetire: r.ThenRetire})
		}
	}
	if t := c.ApplicationFaults; t != nil {
		if t.Limit != nil {
			dst.ApplicationFaults.Limit = *t.Limit
		}
		setDuration(&dst.ApplicationFaults.Window, t.Window)
	}
}

// validate checks the rules: known first steps, each XID, code and action named once, and a
// threshold that can be reached.
func (c Causes) validate() error {
	seen := map[string]int{}
	for i, r := range c.Rules {
		if !slices.Contains(Firsts, r.First) {
			return fmt.Errorf("causes.rules[%d]: first %q: want one of %s", i, r.First, joinFirsts())
		}
		if len(r.XIDs)+len(r.Codes)+len(r.Actions) == 0 {
			return fmt.Errorf("causes.rules[%d]: names no xid, code or action", i)
		}
		if r.ThenRetire && r.First != FirstReset && r.First != FirstNode {
			return fmt.Errorf("causes.rules[%d]: thenRetire follows a reset or node step, not %q", i, r.First)
		}
		var names []string
		for _, x := range r.XIDs {
			if x < 1 || x > 999 {
				return fmt.Errorf("causes.rules[%d]: xid %d: want 1 to 999", i, x)
			}
			names = append(names, fmt.Sprintf("xid %d", x))
		}
		for _, code := range r.Codes {
			names = append(names, "code "+code)
		}
		for _, a := range r.Actions {
			names = append(names, "action "+a)
		}
		for _, n := range names {
			if j, twice := seen[n]; twice {
				return fmt.Errorf("causes.rules[%d]: %s is listed twice (first in causes.rules[%d])", i, n, j)
			}
			seen[n] = i
		}
	}
	if t := c.ApplicationFaults; t.Limit < 0 || t.Window < 0 {
		return fmt.Errorf("causes.applicationFaults: want a limit of at least 1 and a positive window, got %d within %s", t.Limit, t.Window.D())
	}
	if w := c.ApplicationFaults.Window.D(); w > RelapseWindow {
		return fmt.Errorf("causes.applicationFaults.window: at most %s (a device's history keeps 30 days), got %s", RelapseWindow, w)
	}
	return nil
}

func joinFirsts() string {
	s := make([]string, len(Firsts))
	for i, f := range Firsts {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

// CatalogueRetiringRemaps is the catalogue of runs recorded before device-changes 16: it retired a
// GPU whose uncorrectable remapped rows grew, as it retires one whose remap failed.
var CatalogueRetiringRemaps = func() []CauseRule {
	out := make([]CauseRule, 0, len(Catalogue))
	for _, r := range Catalogue {
		if len(r.Codes) == 1 && r.Codes[0] == "uncorrectable-remapped-rows" {
			r.First = FirstRetire
		}
		out = append(out, r)
	}
	return out
}()
