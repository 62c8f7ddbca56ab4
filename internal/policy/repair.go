package policy

import (
	"fmt"
	"time"
)

// Repair is a ladder of steps that tries to bring a quarantined device back before its review,
// and retires it when none does. Without steps, a quarantine waits for its review as before.
type Repair struct {
	Steps []RepairStep `json:"steps,omitempty"`
	// RetireAfter retires a device quarantined this many times within RelapseWindow (a lemon),
	// whatever its ladder says; 0 never does.
	RetireAfter int `json:"retireAfter,omitempty"`
}

// Enabled says whether the policy has a ladder.
func (r Repair) Enabled() bool { return len(r.Steps) > 0 }

// RelapseWindow is how far back RetireAfter counts a device's quarantines.
const RelapseWindow = 30 * 24 * time.Hour

// RepairKind names a step of the ladder.
type RepairKind string

// The steps a ladder can take.
const (
	// RepairReset runs the driver's reset tool in a Pod on the device, once it is idle.
	RepairReset RepairKind = "reset"
)

// RepairStep is one rung: what to do, how often to try, and for how long.
type RepairStep struct {
	Kind RepairKind `json:"kind"`
	// Attempts is how many times the step is tried before the next step (default 1).
	Attempts int `json:"attempts"`
	// Check is the Pod a reset runs: its image, command, timeout and namespace.
	Check Check `json:"check"`
}

// repairEntry is the policy file's `repair:` block.
type repairEntry struct {
	Steps       []repairStepEntry `yaml:"steps"`
	RetireAfter *int              `yaml:"retireAfter"`
}

// repairStepEntry is one step: its kind, attempts, and the Pod it runs (image, command, timeout,
// namespace, deviceClass, as a probe's).
type repairStepEntry struct {
	Kind       string `yaml:"kind"`
	Attempts   *int   `yaml:"attempts"`
	checkEntry `yaml:",inline"`
}

// DefaultResetNamespace is where reset Pods run unless a step says otherwise: beside the probes,
// in a namespace the chart already lets DeviceWarden create Pods in.
const DefaultResetNamespace = DefaultProbeNamespace

func (r *repairEntry) apply(dst *Repair) {
	if r == nil {
		return
	}
	if r.Steps != nil {
		dst.Steps = nil
		for _, s := range r.Steps {
			step := RepairStep{Kind: RepairKind(s.Kind), Attempts: 1,
				Check: Check{Timeout: JSONDuration(5 * time.Minute), Namespace: DefaultResetNamespace}}
			if s.Attempts != nil {
				step.Attempts = *s.Attempts
			}
			s.checkEntry.apply(&step.Check)
			dst.Steps = append(dst.Steps, step)
		}
	}
	if r.RetireAfter != nil {
		dst.RetireAfter = *r.RetireAfter
	}
}

// validate checks every step of a ladder.
func (r Repair) validate() error {
	if r.RetireAfter < 0 {
		return fmt.Errorf("repair.retireAfter must be >= 0, got %d", r.RetireAfter)
	}
	for i, s := range r.Steps {
		switch {
		case s.Kind != RepairReset:
			return fmt.Errorf("repair.steps[%d]: unknown kind %q (known: %s)", i, s.Kind, RepairReset)
		case s.Attempts < 1:
			return fmt.Errorf("repair.steps[%d]: attempts must be >= 1, got %d", i, s.Attempts)
		case s.Check.Image == "" || len(s.Check.Command) == 0:
			return fmt.Errorf("repair.steps[%d]: a %s step needs an image and a command", i, s.Kind)
		case s.Check.Timeout <= 0:
			return fmt.Errorf("repair.steps[%d]: timeout must be positive", i)
		}
	}
	return nil
}
