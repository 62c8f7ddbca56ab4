// Package rolloutplan decides a DRA rollout: it reads and checks a rollout plan, and turns a snapshot
// of nodes, ResourceSlices, ResourceClaims and Pods into a preflight verdict and a gate report.
// It does no I/O: activities build the snapshots and the rollout workflow acts on the verdicts.
package rolloutplan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// Plan is a checked rollout plan: the ownership switch and the ordered phases. It travels in the
// rollout workflow's input, so it is JSON with durations written as "10m".
type Plan struct {
	Name string `json:"name"`
	// OwnerLabel is the node label both the device plugin and the DRA driver select on; Plugin and
	// DRA are its two values.
	OwnerLabel string `json:"ownerLabel"`
	Plugin     string `json:"plugin"`
	DRA        string `json:"dra"`
	// PluginResource is the extended resource the device plugin advertises on nodes it owns.
	PluginResource string `json:"pluginResource"`
	// Prometheus is the base URL of the Prometheus HTTP API the PromQL gates read.
	Prometheus string `json:"prometheus,omitempty"`
	// SlackChannel is where approval requests go ("" = the default channel).
	SlackChannel string `json:"slackChannel,omitempty"`
	// RollbackHold is how long a rolled-back rollout waits for resume before it ends (its admission
	// block stays until the phase is enabled again).
	RollbackHold policy.JSONDuration `json:"rollbackHold"`
	Phases       []Phase             `json:"phases"`
}

// Phase is one step of the rollout.
type Phase struct {
	Name string `json:"name"`
	// Nodes is a label selector for the node pools the phase moves to DRA.
	Nodes string `json:"nodes"`
	// Classes are the DeviceClasses the phase brings in (created if missing) and the driver that
	// publishes their devices.
	Classes []Class `json:"classes"`
	// Namespaces are the tenants that may use the phase's devices (with those of earlier phases).
	Namespaces []string            `json:"namespaces"`
	Soak       policy.JSONDuration `json:"soak"`
	// Approve makes the rollout wait for a person before the next phase.
	Approve bool  `json:"approve,omitempty"`
	Gates   Gates `json:"gates"`
	// Enforcement proves, before tenants may claim the phase's classes, that the driver holds
	// each ShareID to its share (required when a class is shared).
	Enforcement *Enforcement `json:"enforcement,omitempty"`
}

// Class is a DeviceClass a phase uses.
type Class struct {
	Name   string `json:"name" yaml:"name"`
	Driver string `json:"driver" yaml:"driver"`
	// Shared: the phase makes the class's devices shared (consumable capacity), and tenants get
	// it only after an enforcement proof.
	Shared bool `json:"shared,omitempty" yaml:"shared"`
}

// Gates are the thresholds a phase's soak must meet. A nil field is not checked.
type Gates struct {
	// MinClaims: fewer claims created during the soak prove nothing, and the gate fails.
	MinClaims          int            `json:"minClaims,omitempty"`
	ClaimToAllocated   *Latency       `json:"claimToAllocated,omitempty"`
	AllocatedToReady   *Latency       `json:"allocatedToReady,omitempty"`
	AllocationFailures *FailureLimits `json:"allocationFailures,omitempty"`
	MaxFragmentation   *float64       `json:"maxFragmentation,omitempty"`
	MaxDrift           *int           `json:"maxDrift,omitempty"`
	MaxCrossNamespace  *int           `json:"maxCrossNamespace,omitempty"`
	// MaxCapacityViolations caps the shared-capacity invariant violations (internal/capacity) on
	// the phase's devices.
	MaxCapacityViolations *int            `json:"maxCapacityViolations,omitempty"`
	Queries               []PromQueryGate `json:"queries,omitempty"`
}

// Latency caps a stage's p50 and p99 (zero: not checked).
type Latency struct {
	P50 policy.JSONDuration `json:"p50,omitempty"`
	P99 policy.JSONDuration `json:"p99,omitempty"`
}

// FailureLimits caps allocation failures by class.
type FailureLimits struct {
	Retryable    int `json:"retryable" yaml:"retryable"`
	NonRetryable int `json:"nonRetryable" yaml:"nonRetryable"`
	NeedsCleanup int `json:"needsCleanup" yaml:"needsCleanup"`
}

// PromQueryGate is a business SLO: a PromQL query whose scalar (or single-sample) value must stay
// at or under Max and at or over Min.
type PromQueryGate struct {
	Name  string   `json:"name" yaml:"name"`
	Query string   `json:"query" yaml:"query"`
	Max   *float64 `json:"max,omitempty" yaml:"max"`
	Min   *float64 `json:"min,omitempty" yaml:"min"`
	// OnNoData is what the gate does when the query has no value to compare (no sample, NaN,
	// ±Inf: a quantile with no observations, 0/0): fail (the default), pass, or wait (measure
	// again until the data comes, for at most the phase's soak).
	OnNoData string `json:"onNoData,omitempty" yaml:"onNoData"`
}

// What a query gate does when its query has no data.
const (
	NoDataFail = "fail"
	NoDataPass = "pass"
	NoDataWait = "wait"
)

// NoDataAction is the gate's onNoData, fail when unset.
func (q PromQueryGate) NoDataAction() string {
	if q.OnNoData == "" {
		return NoDataFail
	}
	return q.OnNoData
}

// Defaults of a plan file.
const (
	DefaultOwnerLabel   = "devicewarden.io/device-owner"
	DefaultRollbackHold = 7 * 24 * time.Hour
)

// file is the YAML shape of a plan; durations are Go duration strings.
type file struct {
	Name           string           `yaml:"name"`
	OwnerLabel     string           `yaml:"ownerLabel"`
	Plugin         string           `yaml:"plugin"`
	DRA            string           `yaml:"dra"`
	PluginResource string           `yaml:"pluginResource"`
	Prometheus     string           `yaml:"prometheus"`
	SlackChannel   string           `yaml:"slackChannel"`
	RollbackHold   string           `yaml:"rollbackHold"`
	Phases         []phaseFile      `yaml:"phases"`
	lines          map[string]int   `yaml:"-"`
	phaseLines     []map[string]int `yaml:"-"`
}

type phaseFile struct {
	Name       string    `yaml:"name"`
	Nodes      string    `yaml:"nodes"`
	Classes    []Class   `yaml:"classes"`
	Namespaces []string  `yaml:"namespaces"`
	Soak       string    `yaml:"soak"`
	Approve    bool      `yaml:"approve"`
	Gates      gatesFile `yaml:"gates"`
	// Enforcement is the phase's enforcement proof.
	Enforcement *enforcementFile `yaml:"enforcement"`
}

type gatesFile struct {
	MinClaims             int             `yaml:"minClaims"`
	ClaimToAllocated      *latencyFile    `yaml:"claimToAllocated"`
	AllocatedToReady      *latencyFile    `yaml:"allocatedToReady"`
	AllocationFailures    *FailureLimits  `yaml:"allocationFailures"`
	MaxFragmentation      *float64        `yaml:"maxFragmentation"`
	MaxDrift              *int            `yaml:"maxDrift"`
	MaxCrossNamespace     *int            `yaml:"maxCrossNamespace"`
	MaxCapacityViolations *int            `yaml:"maxCapacityViolations"`
	Queries               []PromQueryGate `yaml:"queries"`
}

type latencyFile struct {
	P50 string `yaml:"p50"`
	P99 string `yaml:"p99"`
}

// LoadFile reads and checks a plan file; errors name the file and the line.
func LoadFile(path string) (Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Plan{}, fmt.Errorf("read plan: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return Plan{}, fmt.Errorf("plan %s: %w", path, err)
	}
	return p, nil
}

// nameRE is what a plan or phase name may be: it becomes part of workflow IDs and object names.
var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$`)

// Parse reads plan YAML strictly (unknown fields are errors) and checks it; every error carries the
// line of the field at fault.
func Parse(data []byte) (Plan, error) {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return Plan{}, errors.New("empty plan")
		}
		return Plan{}, err
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return Plan{}, err
	}
	f.lines, f.phaseLines = fieldLines(&root)
	return f.check()
}

// fieldLines maps each top-level key, and each phase's keys, to its line.
func fieldLines(root *yaml.Node) (map[string]int, []map[string]int) {
	top := map[string]int{}
	var phases []map[string]int
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return top, nil
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		top[m.Content[i].Value] = m.Content[i].Line
		if m.Content[i].Value != "phases" {
			continue
		}
		for _, item := range m.Content[i+1].Content {
			keys := map[string]int{"": item.Line}
			for j := 0; j+1 < len(item.Content); j += 2 {
				keys[item.Content[j].Value] = item.Content[j].Line
			}
			phases = append(phases, keys)
		}
	}
	return top, phases
}

func (f *file) line(key string) int {
	if l, ok := f.lines[key]; ok {
		return l
	}
	return 1
}

func (f *file) phaseLine(i int, key string) int {
	if i < len(f.phaseLines) {
		if l, ok := f.phaseLines[i][key]; ok {
			return l
		}
		return f.phaseLines[i][""]
	}
	return f.line("phases")
}

func (f *file) check() (Plan, error) {
	p := Plan{Name: f.Name, OwnerLabel: f.OwnerLabel, Plugin: f.Plugin, DRA: f.DRA, PluginResource: f.PluginResource,
		Prometheus: f.Prometheus, SlackChannel: f.SlackChannel, RollbackHold: policy.JSONDuration(DefaultRollbackHold)}
	if !nameRE.MatchString(p.Name) {
		return Plan{}, fmt.Errorf("line %d: name %q: want a DNS label of at most 40 characters", f.line("name"), p.Name)
	}
	if p.OwnerLabel == "" {
		p.OwnerLabel = DefaultOwnerLabel
	}
	if p.Plugin == "" {
		p.Plugin = "plugin"
	}
	if p.DRA == "" {
		p.DRA = "dra"
	}
	if p.Plugin == p.DRA {
		return Plan{}, fmt.Errorf("line %d: plugin and dra are both %q: the ownership label could not tell them apart", f.line("dra"), p.DRA)
	}
	if p.PluginResource == "" {
		return Plan{}, fmt.Errorf("line %d: pluginResource is required: preflight reads it to find nodes the device plugin still owns", f.line("name"))
	}
	if f.RollbackHold != "" {
		d, err := time.ParseDuration(f.RollbackHold)
		if err != nil || d <= 0 {
			return Plan{}, fmt.Errorf("line %d: rollbackHold %q: want a positive duration such as 72h", f.line("rollbackHold"), f.RollbackHold)
		}
		p.RollbackHold = policy.JSONDuration(d)
	}
	if len(f.Phases) == 0 {
		return Plan{}, fmt.Errorf("line %d: the plan has no phases", f.line("phases"))
	}
	seen := map[string]bool{}
	for i := range f.Phases {
		ph, err := f.checkPhase(i)
		if err != nil {
			return Plan{}, err
		}
		if seen[ph.Name] {
			return Plan{}, fmt.Errorf("line %d: phase name %q is used twice", f.phaseLine(i, "name"), ph.Name)
		}
		seen[ph.Name] = true
		if len(ph.Gates.Queries) > 0 && p.Prometheus == "" {
			return Plan{}, fmt.Errorf("line %d: phase %q has PromQL gates but the plan names no prometheus", f.phaseLine(i, "gates"), ph.Name)
		}
		p.Phases = append(p.Phases, ph)
	}
	return p, nil
}

func (f *file) checkPhase(i int) (Phase, error) {
	in := f.Phases[i]
	at := func(key string) int { return f.phaseLine(i, key) }
	ph := Phase{Name: in.Name, Nodes: in.Nodes, Classes: in.Classes, Namespaces: in.Namespaces, Approve: in.Approve}
	if !nameRE.MatchString(ph.Name) {
		return Phase{}, fmt.Errorf("line %d: phase %d: name %q: want a DNS label of at most 40 characters", at("name"), i+1, ph.Name)
	}
	sel, err := labels.Parse(ph.Nodes)
	if err != nil || ph.Nodes == "" || sel.Empty() {
		return Phase{}, fmt.Errorf("line %d: phase %q: nodes %q: want a label selector naming a pool (e.g. pool=a); an empty one would take every node", at("nodes"), ph.Name, ph.Nodes)
	}
	if len(ph.Classes) == 0 {
		return Phase{}, fmt.Errorf("line %d: phase %q names no classes", at("classes"), ph.Name)
	}
	for _, c := range ph.Classes {
		if c.Name == "" || c.Driver == "" {
			return Phase{}, fmt.Errorf("line %d: phase %q: every class needs a name and a driver", at("classes"), ph.Name)
		}
	}
	if len(ph.Namespaces) == 0 {
		return Phase{}, fmt.Errorf("line %d: phase %q names no tenant namespaces", at("namespaces"), ph.Name)
	}
	soak, err := time.ParseDuration(in.Soak)
	if err != nil || soak <= 0 {
		return Phase{}, fmt.Errorf("line %d: phase %q: soak %q: want a positive duration such as 30m", at("soak"), ph.Name, in.Soak)
	}
	ph.Soak = policy.JSONDuration(soak)
	g, err := in.Gates.check()
	if err != nil {
		return Phase{}, fmt.Errorf("line %d: phase %q: gates: %w", at("gates"), ph.Name, err)
	}
	ph.Gates = g
	if ph.Enforcement, err = in.Enforcement.check(); err != nil {
		return Phase{}, fmt.Errorf("line %d: phase %q: enforcement: %w", at("enforcement"), ph.Name, err)
	}
	for _, c := range ph.Classes {
		if c.Shared && ph.Enforcement == nil {
			return Phase{}, fmt.Errorf("line %d: phase %q makes class %s shared: it needs an enforcement proof (enforcement: image, share, ...) before tenants share its devices", at("classes"), ph.Name, c.Name)
		}
	}
	return ph, nil
}

func (g gatesFile) check() (Gates, error) {
	out := Gates{MinClaims: g.MinClaims, AllocationFailures: g.AllocationFailures, MaxFragmentation: g.MaxFragmentation,
		MaxDrift: g.MaxDrift, MaxCrossNamespace: g.MaxCrossNamespace, MaxCapacityViolations: g.MaxCapacityViolations, Queries: g.Queries}
	if g.MinClaims < 0 {
		return Gates{}, fmt.Errorf("minClaims %d is negative", g.MinClaims)
	}
	var err error
	if out.ClaimToAllocated, err = g.ClaimToAllocated.check("claimToAllocated"); err != nil {
		return Gates{}, err
	}
	if out.AllocatedToReady, err = g.AllocatedToReady.check("allocatedToReady"); err != nil {
		return Gates{}, err
	}
	if f := g.AllocationFailures; f != nil && (f.Retryable < 0 || f.NonRetryable < 0 || f.NeedsCleanup < 0) {
		return Gates{}, errors.New("allocationFailures: limits must not be negative")
	}
	if v := g.MaxFragmentation; v != nil && !(*v >= 0 && *v <= 1) { // NaN is neither
		return Gates{}, fmt.Errorf("maxFragmentation %v: want a fraction between 0 and 1", *v)
	}
	if v := g.MaxDrift; v != nil && *v < 0 {
		return Gates{}, fmt.Errorf("maxDrift %d is negative", *v)
	}
	if v := g.MaxCrossNamespace; v != nil && *v < 0 {
		return Gates{}, fmt.Errorf("maxCrossNamespace %d is negative", *v)
	}
	if v := g.MaxCapacityViolations; v != nil && *v < 0 {
		return Gates{}, fmt.Errorf("maxCapacityViolations %d is negative", *v)
	}
	names := map[string]bool{}
	for _, q := range g.Queries {
		if q.Name == "" || q.Query == "" {
			return Gates{}, errors.New("queries: every query needs a name and a query")
		}
		if names[q.Name] {
			return Gates{}, fmt.Errorf("queries: %q is used twice", q.Name)
		}
		names[q.Name] = true
		if q.Max == nil && q.Min == nil {
			return Gates{}, fmt.Errorf("queries: %q sets neither max nor min", q.Name)
		}
		for _, b := range []*float64{q.Max, q.Min} {
			if b != nil && (math.IsNaN(*b) || math.IsInf(*b, 0)) {
				return Gates{}, fmt.Errorf("queries: %q: a bound of %v compares with nothing: want a finite number", q.Name, *b)
			}
		}
		switch q.OnNoData {
		case "", NoDataFail, NoDataPass, NoDataWait:
		default:
			return Gates{}, fmt.Errorf("queries: %q: onNoData %q: want fail, pass or wait", q.Name, q.OnNoData)
		}
	}
	return out, nil
}

func (l *latencyFile) check(name string) (*Latency, error) {
	if l == nil {
		return nil, nil
	}
	var out Latency
	for _, f := range []struct {
		key string
		in  string
		out *policy.JSONDuration
	}{{"p50", l.P50, &out.P50}, {"p99", l.P99, &out.P99}} {
		if f.in == "" {
			continue
		}
		d, err := time.ParseDuration(f.in)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s.%s %q: want a positive duration such as 5s", name, f.key, f.in)
		}
		*f.out = policy.JSONDuration(d)
	}
	if out.P50 == 0 && out.P99 == 0 {
		return nil, fmt.Errorf("%s sets neither p50 nor p99", name)
	}
	return &out, nil
}

// AllowedNamespaces are the tenants that may use devices of phase i: its own and every earlier
// phase's.
func (p Plan) AllowedNamespaces(i int) map[string]bool {
	out := map[string]bool{}
	for j := 0; j <= i && j < len(p.Phases); j++ {
		for _, ns := range p.Phases[j].Namespaces {
			out[ns] = true
		}
	}
	return out
}

// ClassNames lists a phase's DeviceClass names.
func (ph Phase) ClassNames() []string {
	out := make([]string, 0, len(ph.Classes))
	for _, c := range ph.Classes {
		out = append(out, c.Name)
	}
	return out
}

// Drivers lists the distinct drivers of a phase's classes, in the classes' order.
func (ph Phase) Drivers() []string {
	var out []string
	for _, c := range ph.Classes {
		if !slices.Contains(out, c.Driver) {
			out = append(out, c.Driver)
		}
	}
	return out
}
