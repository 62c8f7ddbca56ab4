// Package policy reads the policy file: per device class or driver, how a device is fenced,
// reviewed and migrated, and the durations it names. Decisions live in decide, breaker,
// migrationplan and escalation.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Effects a quarantine taint may have.
const (
	EffectNoSchedule = "NoSchedule"
	EffectNoExecute  = "NoExecute"
	EffectNone       = "None"
)

// Policy is what one device's workflow follows. It is a snapshot passed into the workflow, so a
// changed file affects newly started devices, never a decision already in flight.
type Policy struct {
	// Name says which entry of the policy file matched ("default" when none did).
	Name string `json:"name"`
	// ToleranceWindow is how long Unknown is tolerated before new allocations are restricted.
	ToleranceWindow JSONDuration `json:"toleranceWindow"`
	// BackoffCap bounds the tolerance window, which doubles with each repeated Unknown episode.
	BackoffCap JSONDuration `json:"backoffCap"`
	// HeartbeatLimit is the age after which a Healthy report is no longer proof: it becomes Unknown.
	HeartbeatLimit JSONDuration `json:"heartbeatLimit"`
	// StabilityWindow is how long a recovered device must stay Healthy on probation before release.
	StabilityWindow JSONDuration `json:"stabilityWindow"`
	// SourceWait is how long a review whose checks and window passed waits for the sources that
	// reported the fault to say Healthy (a recovery action back to none, a driver's taint gone)
	// before it fails. Zero: it does not wait. Always written, so a state carried from a run
	// before it existed can be told from one that said 0 (decide.Rules.CarriedDefaults).
	SourceWait JSONDuration `json:"sourceWait"`
	// QuarantineLease is how long a quarantine lasts before its recovery review starts.
	QuarantineLease JSONDuration `json:"quarantineLease"`
	// TaintEffect for Unhealthy devices: NoSchedule (default) or NoExecute. Unknown never evicts.
	TaintEffect string `json:"taintEffect"`
	// ApprovalRequired makes release wait for a person's approval.
	ApprovalRequired bool `json:"approvalRequired"`
	// ApprovalTimeout is how long a release waits for that approval; the device stays quarantined after it.
	ApprovalTimeout JSONDuration `json:"approvalTimeout,omitempty"`
	// ProbeRestricted makes a restricted device (Unknown for a whole window) pass the probe too before
	// probation; when false it goes straight to probation and canary.
	ProbeRestricted bool `json:"probeRestricted,omitempty"`
	// Probe is the check a quarantined device must pass before probation; Canary the job it runs on probation.
	Probe  Check `json:"probe,omitempty"`
	Canary Check `json:"canary,omitempty"`
	// ProbeAfter is the probe of a review that follows a repair step, by the step's kind
	// (probepath.go): a diagnostic per path. A kind it does not name probes with Probe.
	ProbeAfter map[RepairKind]Check `json:"probeAfter,omitempty"`
	// Identity names the device attributes (of the device's driver) that single out one device, so a
	// probe can be pinned to it. Filled from the policy file's drivers section.
	Identity []string `json:"identity,omitempty"`
	// ResetDomain is what a reset of the device reaches (DomainDevice, DomainNode or
	// "attribute:<name>"): a reset waits until every device of it is idle. From the drivers
	// section; empty (the device alone) when the section does not say.
	ResetDomain string `json:"resetDomain,omitempty"`
	// SlackChannel receives this policy's notifications and approval requests ("" = none).
	SlackChannel string `json:"slackChannel,omitempty"`
	// Ambiguous says what a health report that could be any of several devices of a claim does:
	// AmbiguousAlert (default: an alert and an Event, nothing tainted) or AmbiguousQuarantine (every
	// candidate is treated as reported).
	Ambiguous string `json:"ambiguous,omitempty"`
	// EscalationThreshold is how many failed devices on one node escalate to a node-level decision.
	EscalationThreshold int `json:"escalationThreshold"`
	// Migration moves jobs off a quarantined device (off unless the policy turns it on).
	Migration Migration `json:"migration,omitempty"`
	// Repair is the ladder a quarantined device climbs before its review (none by default).
	Repair Repair `json:"repair,omitempty"`
	// Causes says what a fault's cause changes: its first step, and whether it is fenced.
	Causes Causes `json:"causes,omitzero"`
	// NotRunAlertAfter is how many checks or steps in a row may end not run (the tooling's
	// failure: an image not pulled, a Pod never scheduled) before a person is alerted; each is
	// tried again, later each time. 0 (a policy written before it): DefaultNotRunAlertAfter.
	NotRunAlertAfter int `json:"notRunAlertAfter,omitempty"`
	// NotRunRetry is how long the first check or step that did not run waits before it is taken
	// again; each next wait doubles, up to MaxNotRunRetry. 0 (a policy written before it):
	// DefaultNotRunRetry.
	NotRunRetry JSONDuration `json:"notRunRetry,omitempty"`
}

// DefaultNotRunRetry is the first wait after a check or step that did not run.
const DefaultNotRunRetry = time.Minute

// MaxNotRunRetry caps the wait between the tries of a check or step that does not run.
const MaxNotRunRetry = 30 * time.Minute

// DefaultNotRunAlertAfter is how many not-run checks or steps in a row alert a person.
const DefaultNotRunAlertAfter = 3

// DefaultSourceWait covers a detector's path to DeviceWarden: DCGM's field updates (30 s),
// Prometheus' scrape and DeviceWarden's poll (15 s each), with room to spare.
const DefaultSourceWait = 5 * time.Minute

// Default applies when no policy file entry matches.
func Default() Policy {
	return Policy{
		Name:                "default",
		ToleranceWindow:     JSONDuration(5 * time.Minute),
		BackoffCap:          JSONDuration(time.Hour),
		HeartbeatLimit:      JSONDuration(10 * time.Minute),
		StabilityWindow:     JSONDuration(30 * time.Minute),
		SourceWait:          JSONDuration(DefaultSourceWait),
		QuarantineLease:     JSONDuration(24 * time.Hour),
		TaintEffect:         EffectNoSchedule,
		ApprovalRequired:    false,
		ApprovalTimeout:     JSONDuration(24 * time.Hour),
		ProbeRestricted:     true,
		Probe:               Check{Image: DefaultCheckImage, Command: []string{"sh", "-c", "exit 0"}, Timeout: JSONDuration(5 * time.Minute), Namespace: DefaultProbeNamespace},
		Canary:              Check{Image: DefaultCheckImage, Command: []string{"sh", "-c", "exit 0"}, Timeout: JSONDuration(10 * time.Minute), Namespace: DefaultCanaryNamespace},
		EscalationThreshold: 4,
		Ambiguous:           AmbiguousAlert,
		NotRunAlertAfter:    DefaultNotRunAlertAfter,
		NotRunRetry:         JSONDuration(DefaultNotRunRetry),
	}
}

// What an ambiguous health report does.
const (
	AmbiguousAlert      = "alert"
	AmbiguousQuarantine = "quarantine-candidates"
)

// CDI styles: how a driver names its devices in the CDI device IDs kubelet reports as resourceIDs
// (the part after "="), so a report from a multi-device claim can be pinned to exactly one device.
const (
	// CDIDevice: the name is the device's name in its pool.
	CDIDevice = "device"
	// CDIClaimDevice: the name is "<claim-uid>-<device>".
	CDIClaimDevice = "claim-device"
	// CDIAttributePrefix starts a style "attribute:<name>": the name is the value of the device's
	// attribute <name> in its ResourceSlice (a GPU UUID, a serial number).
	CDIAttributePrefix = "attribute:"
)

// CDIAttribute returns the attribute a style names ("attribute:uuid" -> "uuid"), if it is one.
func CDIAttribute(style string) (string, bool) {
	name, ok := strings.CutPrefix(style, CDIAttributePrefix)
	return name, ok && name != ""
}

// validCDIStyle reports whether style is one a driver may declare.
func validCDIStyle(style string) bool {
	if _, ok := CDIAttribute(style); ok {
		return true
	}
	return style == CDIDevice || style == CDIClaimDevice
}

// DefaultCheckImage runs the default probe and canary: they prove only that the device can be
// allocated, prepared by its driver and reported Healthy. Real fleets set a diagnostic image.
const DefaultCheckImage = "busybox:1.37"

// Namespaces where probe and canary Pods run unless the policy names others.
const (
	DefaultProbeNamespace  = "devicewarden-probes"
	DefaultCanaryNamespace = "devicewarden-canary"
)

// Check is a Pod DeviceWarden runs on exactly one device: the probe (tolerating the quarantine
// taint) or the canary (tolerating the probation taint).
type Check struct {
	Image   string       `json:"image,omitempty"`
	Command []string     `json:"command,omitempty"`
	Timeout JSONDuration `json:"timeout,omitempty"`
	// Namespace of the Pod.
	Namespace string `json:"namespace,omitempty"`
	// DeviceClass the check's claim requests (default: the class the device was last requested through).
	DeviceClass string `json:"deviceClass,omitempty"`
	// NotRunExitCodes are the exit codes by which the check's tool says it could not run (a reset
	// tool's "in use by another client"): the tooling's failure, not the device's.
	NotRunExitCodes []int32 `json:"notRunExitCodes,omitempty"`
}

// NotRunBy says whether exit code code means the check's tool did not run.
func (c Check) NotRunBy(code int32) bool { return slices.Contains(c.NotRunExitCodes, code) }

// checkEntry is a Check in the policy file; unset fields keep the default's.
type checkEntry struct {
	Image       *string   `yaml:"image"`
	Command     []string  `yaml:"command"`
	Timeout     *Duration `yaml:"timeout"`
	Namespace   *string   `yaml:"namespace"`
	DeviceClass *string   `yaml:"deviceClass"`
	NotRun      exitCodes `yaml:"notRunExitCodes"`
}

// exitCodes reads a list of exit codes, each a number from 1 to 255 (0 is success).
type exitCodes []int32

// UnmarshalYAML refuses anything but a list of numbers from 1 to 255.
func (e *exitCodes) UnmarshalYAML(n *yaml.Node) error {
	bad := fmt.Errorf("line %d: notRunExitCodes is a list of exit codes, numbers from 1 to 255 (e.g. [3, 17])", n.Line)
	if n.Kind != yaml.SequenceNode {
		return bad
	}
	out := exitCodes{}
	for _, item := range n.Content {
		var code int32
		if item.Kind != yaml.ScalarNode || item.Tag != "!!int" || item.Decode(&code) != nil || code < 1 || code > 255 {
			return fmt.Errorf("line %d: notRunExitCodes: %q is not an exit code (a number from 1 to 255)", item.Line, item.Value)
		}
		out = append(out, code)
	}
	*e = out
	return nil
}

func (c *checkEntry) apply(dst *Check) {
	if c == nil {
		return
	}
	if c.Image != nil {
		dst.Image = *c.Image
	}
	if c.Command != nil {
		dst.Command = c.Command
	}
	setDuration(&dst.Timeout, c.Timeout)
	if c.Namespace != nil {
		dst.Namespace = *c.Namespace
	}
	if c.DeviceClass != nil {
		dst.DeviceClass = *c.DeviceClass
	}
	if c.NotRun != nil {
		dst.NotRunExitCodes = c.NotRun
	}
}

// Match selects devices by DeviceClass or by driver; an empty field matches anything.
type Match struct {
	DeviceClass string `yaml:"deviceClass"`
	Driver      string `yaml:"driver"`
}

// entry is one policy in the file: a match plus the fields it overrides.
type entry struct {
	Name                string          `yaml:"name"`
	Match               Match           `yaml:"match"`
	ToleranceWindow     *Duration       `yaml:"toleranceWindow"`
	BackoffCap          *Duration       `yaml:"backoffCap"`
	HeartbeatLimit      *Duration       `yaml:"heartbeatLimit"`
	StabilityWindow     *Duration       `yaml:"stabilityWindow"`
	SourceWait          *Duration       `yaml:"sourceWait"`
	QuarantineLease     *Duration       `yaml:"quarantineLease"`
	TaintEffect         *string         `yaml:"taintEffect"`
	ApprovalRequired    *bool           `yaml:"approvalRequired"`
	ApprovalTimeout     *Duration       `yaml:"approvalTimeout"`
	ProbeRestricted     *bool           `yaml:"probeRestricted"`
	Probe               *checkEntry     `yaml:"probe"`
	Canary              *checkEntry     `yaml:"canary"`
	ProbeAfter          probeAfterEntry `yaml:"probeAfter"`
	SlackChannel        *string         `yaml:"slackChannel"`
	Ambiguous           *string         `yaml:"ambiguous"`
	EscalationThreshold *int            `yaml:"escalationThreshold"`
	Migration           *migrationEntry `yaml:"migration"`
	Repair              *repairEntry    `yaml:"repair"`
	Causes              *causesEntry    `yaml:"causes"`
	NotRunAlertAfter    *int            `yaml:"notRunAlertAfter"`
	NotRunRetry         *Duration       `yaml:"notRunRetry"`
	line                int
}

// driverEntry describes one driver: the attributes that single out one of its devices, and how
// its CDI device IDs name devices (one style, or a list while an upgrade changes the naming).
type driverEntry struct {
	Identity []string `yaml:"identity"`
	CDI      styles   `yaml:"cdi"`
	// Units says how the driver's devices form physical units (default: devices that draw on a
	// common counter set are one unit).
	Units *unitsEntry `yaml:"units"`
	// ResetDomain says what a reset of one device reaches (domain.go; default: the device).
	ResetDomain string `yaml:"resetDomain"`
}

// unitsEntry is a driver's units: a grouping attribute, or partitions that fail independently.
type unitsEntry struct {
	Attribute   string `yaml:"attribute"`
	Independent bool   `yaml:"independent"`
}

// styles reads a single CDI style or a list of them.
type styles []string

// UnmarshalYAML accepts "cdi: device" and "cdi: [device, attribute:uuid]".
func (s *styles) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var one string
		if err := n.Decode(&one); err != nil {
			return err
		}
		*s = styles{one}
		return nil
	}
	var many []string
	if err := n.Decode(&many); err != nil {
		return fmt.Errorf("line %d: cdi is a style or a list of styles", n.Line)
	}
	*s = many
	return nil
}

type file struct {
	Default  entry                  `yaml:"default"`
	Policies []entry                `yaml:"policies"`
	Drivers  map[string]driverEntry `yaml:"drivers"`
	Signals  *signalsEntry          `yaml:"signals"`
}

// Set is a loaded policy file.
type Set struct {
	def      Policy
	policies []entry
	identity map[string][]string
	cdi      map[string][]string
	units    map[string]device.Grouping
	domains  map[string]string
	signals  *Signals
	warnings []string
}

// Warnings are what the file asks for that DeviceWarden cannot fully honour (each says why); the
// file still loads.
func (s *Set) Warnings() []string { return s.warnings }

// WithCDI returns a copy of the set that knows how driver names devices in CDI device IDs, unless
// the file already says.
func (s *Set) WithCDI(driver string, styles ...string) *Set {
	out := *s
	out.cdi = map[string][]string{}
	for k, v := range s.cdi {
		out.cdi[k] = v
	}
	if len(out.cdi[driver]) == 0 {
		out.cdi[driver] = styles
	}
	return &out
}

// CDIStyles are the ways the driver's CDI device IDs may name devices (none known: only canonical
// <driver>/<pool>/<device> IDs identify a device of a multi-device claim).
func (s *Set) CDIStyles(driver string) []string { return s.cdi[driver] }

// Units says how the driver's devices form physical units: the drivers section's units, or by
// shared counter sets.
func (s *Set) Units(driver string) device.Grouping { return s.units[driver] }

// CDIAttributes lists the device attributes that the driver's CDI styles read, so the watcher
// keeps only those from its ResourceSlices.
func (s *Set) CDIAttributes(driver string) []string {
	var out []string
	for _, st := range s.cdi[driver] {
		if name, ok := CDIAttribute(st); ok {
			out = append(out, name)
		}
	}
	return out
}

// DefaultSet is the set used when no file is given: the default policy for every device.
func DefaultSet() *Set { return &Set{def: Default()} }

// WithIdentity returns a copy of the set that knows how to single out one device of driver (used
// for the simulated driver when no policy file names it).
func (s *Set) WithIdentity(driver string, attrs ...string) *Set {
	out := *s
	out.identity = map[string][]string{}
	for k, v := range s.identity {
		out.identity[k] = v
	}
	if _, ok := out.identity[driver]; !ok {
		out.identity[driver] = attrs
	}
	return &out
}

// Duration is a time.Duration written as "5m", "1h30m".
type Duration struct{ time.Duration }

// setDuration overrides dst with a duration the file sets.
func setDuration(dst *JSONDuration, src *Duration) {
	if src != nil {
		*dst = JSONDuration(src.Duration)
	}
}

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (use e.g. 90s, 5m, 1h)", n.Line, s)
	}
	d.Duration = v
	return nil
}

// LoadFile reads a policy file; the error names the file and the line.
func LoadFile(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy file: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	return s, nil
}

// Parse reads policy YAML. Unknown fields, bad durations, bad effects and out-of-range values are
// errors with their line number, so a typo can never silently fall back to acting on everything.
func Parse(data []byte) (*Set, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var f file
	if root.Kind != 0 {
		strict := yaml.NewDecoder(bytes.NewReader(data))
		strict.KnownFields(true)
		if err := strict.Decode(&f); err != nil {
			return nil, err
		}
		annotateLines(&root, &f)
	}
	def, err := f.Default.apply(Default(), "default")
	if err != nil {
		return nil, err
	}
	s := &Set{def: def, identity: map[string][]string{}, cdi: map[string][]string{}, units: map[string]device.Grouping{}, domains: map[string]string{}}
	sig, err := f.Signals.apply(DefaultSignals())
	if err != nil {
		return nil, err
	}
	s.signals = &sig
	if w := def.migrationWarning(); w != "" {
		s.warnings = append(s.warnings, w)
	}
	for drv, d := range f.Drivers {
		if len(d.Identity) == 0 {
			return nil, fmt.Errorf("drivers.%s: identity lists no attribute: without one a probe could land on a neighbouring device", drv)
		}
		s.identity[drv] = d.Identity
		for _, st := range d.CDI {
			if !validCDIStyle(st) {
				return nil, fmt.Errorf("drivers.%s.cdi %q: want %s, %s or %s<attribute>", drv, st, CDIDevice, CDIClaimDevice, CDIAttributePrefix)
			}
		}
		if len(d.CDI) > 0 {
			s.cdi[drv] = d.CDI
		}
		if u := d.Units; u != nil {
			if (u.Attribute == "") == !u.Independent {
				return nil, fmt.Errorf("drivers.%s.units: give either attribute (the attribute its partitions share with their device) or independent: true, not both or neither", drv)
			}
			s.units[drv] = device.Grouping{Attribute: u.Attribute, Independent: u.Independent}
		}
		if d.ResetDomain != "" {
			if err := validDomain(d.ResetDomain); err != nil {
				return nil, fmt.Errorf("drivers.%s: %w", drv, err)
			}
			s.domains[drv] = d.ResetDomain
		}
	}
	names := map[string]int{}
	for i, e := range f.Policies {
		if e.Name == "" {
			return nil, fmt.Errorf("line %d: policy %d has no name", e.line, i+1)
		}
		if prev, dup := names[e.Name]; dup {
			return nil, fmt.Errorf("line %d: policy name %q already used at line %d", e.line, e.Name, prev)
		}
		names[e.Name] = e.line
		if e.Match.DeviceClass == "" && e.Match.Driver == "" {
			return nil, fmt.Errorf("line %d: policy %q matches nothing: set match.deviceClass or match.driver", e.line, e.Name)
		}
		p, err := e.apply(def, e.Name)
		if err != nil {
			return nil, err
		}
		if w := p.migrationWarning(); w != "" {
			s.warnings = append(s.warnings, fmt.Sprintf("line %d: %s", e.line, w))
		}
		if e.Match.Driver != "" && len(s.identity[e.Match.Driver]) == 0 {
			return nil, fmt.Errorf("line %d: policy %q: driver %s has no identity attributes: add drivers.%s.identity (e.g. a UUID attribute) so probes run on exactly one device", e.line, e.Name, e.Match.Driver, e.Match.Driver)
		}
		s.policies = append(s.policies, e)
	}
	return s, nil
}

// annotateLines records each policy entry's line for error messages.
func annotateLines(root *yaml.Node, f *file) {
	if len(root.Content) == 0 {
		return
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		switch m.Content[i].Value {
		case "default":
			f.Default.line = m.Content[i+1].Line
		case "policies":
			for j, item := range m.Content[i+1].Content {
				if j < len(f.Policies) {
					f.Policies[j].line = item.Line
				}
			}
		}
	}
}

func (e entry) apply(base Policy, name string) (Policy, error) {
	p := base
	p.Name = name
	setDuration(&p.ToleranceWindow, e.ToleranceWindow)
	setDuration(&p.BackoffCap, e.BackoffCap)
	setDuration(&p.HeartbeatLimit, e.HeartbeatLimit)
	setDuration(&p.StabilityWindow, e.StabilityWindow)
	setDuration(&p.SourceWait, e.SourceWait)
	setDuration(&p.QuarantineLease, e.QuarantineLease)
	if e.TaintEffect != nil {
		p.TaintEffect = *e.TaintEffect
	}
	if e.ApprovalRequired != nil {
		p.ApprovalRequired = *e.ApprovalRequired
	}
	setDuration(&p.ApprovalTimeout, e.ApprovalTimeout)
	if e.ProbeRestricted != nil {
		p.ProbeRestricted = *e.ProbeRestricted
	}
	p.Probe.Command = append([]string(nil), p.Probe.Command...)
	p.Canary.Command = append([]string(nil), p.Canary.Command...)
	e.Probe.apply(&p.Probe)
	e.Canary.apply(&p.Canary)
	if err := e.ProbeAfter.apply(p.Probe, &p.ProbeAfter); err != nil {
		return p, fmt.Errorf("line %d: policy %q: %w", e.line, name, err)
	}
	if e.SlackChannel != nil {
		p.SlackChannel = *e.SlackChannel
	}
	if e.Ambiguous != nil {
		p.Ambiguous = *e.Ambiguous
	}
	if e.EscalationThreshold != nil {
		p.EscalationThreshold = *e.EscalationThreshold
	}
	e.Migration.apply(&p.Migration)
	e.Repair.apply(&p.Repair)
	e.Causes.apply(&p.Causes)
	if e.NotRunAlertAfter != nil {
		p.NotRunAlertAfter = *e.NotRunAlertAfter
	}
	setDuration(&p.NotRunRetry, e.NotRunRetry)
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("line %d: policy %q: %w", e.line, name, err)
	}
	return p, nil
}

// Validate checks ranges and enumerations.
func (p Policy) Validate() error {
	for _, d := range []struct {
		name string
		v    JSONDuration
	}{{"toleranceWindow", p.ToleranceWindow}, {"backoffCap", p.BackoffCap}, {"heartbeatLimit", p.HeartbeatLimit},
		{"quarantineLease", p.QuarantineLease}, {"approvalTimeout", p.ApprovalTimeout},
		{"probe.timeout", p.Probe.Timeout}, {"canary.timeout", p.Canary.Timeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, got %s", d.name, d.v.D())
		}
	}
	for _, c := range []struct {
		name string
		c    Check
	}{{"probe", p.Probe}, {"canary", p.Canary}} {
		if c.c.Image == "" || c.c.Namespace == "" {
			return fmt.Errorf("%s.image and %s.namespace must be set", c.name, c.name)
		}
	}
	for _, kind := range slices.Sorted(maps.Keys(p.ProbeAfter)) {
		c := p.ProbeAfter[kind]
		switch {
		case !slices.Contains(RepairKinds, kind):
			return fmt.Errorf("probeAfter.%s: not a repair step kind (known: %s, %s)", kind, RepairReset, RepairNode)
		case c.Image == "" || len(c.Command) == 0 || c.Namespace == "":
			return fmt.Errorf("probeAfter.%s: image, command and namespace must be set", kind)
		case c.Timeout <= 0:
			return fmt.Errorf("probeAfter.%s.timeout must be positive", kind)
		}
	}
	if p.StabilityWindow < 0 {
		return fmt.Errorf("stabilityWindow must not be negative, got %s", p.StabilityWindow)
	}
	if p.SourceWait < 0 {
		return fmt.Errorf("sourceWait must not be negative, got %s", p.SourceWait.D())
	}
	if p.BackoffCap < p.ToleranceWindow {
		return fmt.Errorf("backoffCap (%s) must be at least toleranceWindow (%s)", p.BackoffCap, p.ToleranceWindow)
	}
	switch p.TaintEffect {
	case EffectNoSchedule, EffectNoExecute:
	default:
		return fmt.Errorf("taintEffect %q: want NoSchedule or NoExecute", p.TaintEffect)
	}
	switch p.Ambiguous {
	case AmbiguousAlert, AmbiguousQuarantine:
	default:
		return fmt.Errorf("ambiguous %q: want %s or %s", p.Ambiguous, AmbiguousAlert, AmbiguousQuarantine)
	}
	if p.EscalationThreshold < 1 {
		return fmt.Errorf("escalationThreshold must be >= 1, got %d", p.EscalationThreshold)
	}
	if p.NotRunAlertAfter < 1 {
		return fmt.Errorf("notRunAlertAfter must be >= 1, got %d", p.NotRunAlertAfter)
	}
	if p.NotRunRetry <= 0 || p.NotRunRetry.D() > MaxNotRunRetry {
		return fmt.Errorf("notRunRetry must be positive and at most %s, got %s", MaxNotRunRetry, p.NotRunRetry.D())
	}
	if err := p.Repair.validate(); err != nil {
		return err
	}
	if err := p.Causes.validate(); err != nil {
		return err
	}
	if p.Repair.MovesHolders() && !p.Migration.Enabled {
		return fmt.Errorf("repair: a step with holders: %s moves them with the policy's migration; enable migration or choose holders: %s", HoldersMove, HoldersWait)
	}
	return p.Migration.validate()
}

// For returns the policy of a device: the first entry whose match fits, else the default.
// DeviceClass is preferred over driver when both entries exist, because it is the narrower key.
func (s *Set) For(deviceClass, driver string) Policy {
	p := s.match(deviceClass, driver)
	p.Identity = s.identity[driver]
	p.ResetDomain = s.domains[driver]
	return p
}

// All is every policy of the file: the default, then each entry as it applies (its match says
// to which devices), for a tool that checks them all.
func (s *Set) All() []Policy {
	out := []Policy{s.def}
	for _, e := range s.policies {
		p, _ := e.apply(s.def, e.Name)
		out = append(out, p)
	}
	return out
}

func (s *Set) match(deviceClass, driver string) Policy {
	for _, byClass := range []bool{true, false} {
		for _, e := range s.policies {
			if byClass && e.Match.DeviceClass != "" && e.Match.DeviceClass == deviceClass && (e.Match.Driver == "" || e.Match.Driver == driver) {
				p, _ := e.apply(s.def, e.Name)
				return p
			}
			if !byClass && e.Match.DeviceClass == "" && e.Match.Driver == driver {
				p, _ := e.apply(s.def, e.Name)
				return p
			}
		}
	}
	return s.def
}
