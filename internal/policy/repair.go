package policy

import (
	"fmt"
	"slices"
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

// MaxRetireAfter bounds RetireAfter: a device keeps the records of its newest quarantines for
// faults up to this many, so a larger value could never be reached.
const MaxRetireAfter = 20

// RepairKind names a step of the ladder.
type RepairKind string

// The steps a ladder can take.
const (
	// RepairReset runs the driver's reset tool in a Pod on the device, once it is idle.
	RepairReset RepairKind = "reset"
	// RepairNode asks the node's remediator to reboot the node (an object from the step's
	// template), and waits until the node booted again and is Ready.
	RepairNode RepairKind = "node"
)

// RepairKinds are the kinds a step can have.
var RepairKinds = []RepairKind{RepairReset, RepairNode}

// RepairStep is one rung: what to do, how often to try, and for how long.
type RepairStep struct {
	Kind RepairKind `json:"kind"`
	// Attempts is how many times the step is tried before the next step (default 1).
	Attempts int `json:"attempts"`
	// Check is the Pod a reset runs: its image, command, timeout and namespace. A node step
	// uses only its timeout: how long the node has to boot again and be Ready.
	Check Check `json:"check"`
	// Template is a node step's object (JSON), created to ask the node's remediator for a
	// reboot; its strings may name {{ .Node }}, {{ .Device }}, {{ .Driver }} and {{ .Pool }}.
	Template string `json:"template,omitempty"`
	// Holders says who moves the node's other Pods that hold devices before a node step:
	// HoldersWait (the default) waits until none is left; HoldersMove keeps new claims off the
	// node's devices and moves them with the policy's migration; HoldersRemediator leaves them to
	// the remediator (one that drains the node itself). A reset step's holders are those of the
	// other devices of its reset domain (the driver's resetDomain): wait (the default) or move.
	Holders string `json:"holders,omitempty"`
	// Approval: each try of the step waits for a person's approval (Slack or `device approve`),
	// for the policy's approvalTimeout; a rejection or no answer stops the ladder.
	Approval bool `json:"approval,omitempty"`
	// NodeCheck is a node step's check across the node: once the node booted again, and before
	// any of its devices goes back, one Pod on the node claims every device of its class there
	// (an all-reduce across its GPUs). It failing fails the step; it not running (its image not
	// pulled, its Pod never scheduled) is the tooling's failure. Nil: none.
	NodeCheck *Check `json:"nodeCheck,omitempty"`
}

// DefaultNodeCheckTimeout is how long a node check may take unless it says.
const DefaultNodeCheckTimeout = 15 * time.Minute

// Who moves a node's other device holders before its reboot.
const (
	HoldersWait       = "wait"
	HoldersMove       = "move"
	HoldersRemediator = "remediator"
)

// DefaultNodeTimeout is how long a node step waits for the node to boot again, unless it says.
const DefaultNodeTimeout = 20 * time.Minute

// repairEntry is the policy file's `repair:` block.
type repairEntry struct {
	Steps       []repairStepEntry `yaml:"steps"`
	RetireAfter *int              `yaml:"retireAfter"`
}

// repairStepEntry is one step: its kind, attempts, and the Pod it runs (image, command, timeout,
// namespace, deviceClass, as a probe's).
type repairStepEntry struct {
	Kind       string         `yaml:"kind"`
	Attempts   *int           `yaml:"attempts"`
	Template   map[string]any `yaml:"template"`
	Holders    string         `yaml:"holders"`
	Approval   bool           `yaml:"approval"`
	NodeCheck  *checkEntry    `yaml:"nodeCheck"`
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
			step := RepairStep{Kind: RepairKind(s.Kind), Attempts: 1, Holders: s.Holders, Approval: s.Approval,
				Check: Check{Timeout: JSONDuration(5 * time.Minute), Namespace: DefaultResetNamespace}}
			if step.Kind == RepairNode {
				step.Check = Check{Timeout: JSONDuration(DefaultNodeTimeout)}
			}
			if step.Holders == "" {
				step.Holders = HoldersWait
			}
			if s.Attempts != nil {
				step.Attempts = *s.Attempts
			}
			if s.Template != nil {
				step.Template = templateJSON(s.Template)
			}
			s.checkEntry.apply(&step.Check)
			if s.NodeCheck != nil {
				step.NodeCheck = &Check{Timeout: JSONDuration(DefaultNodeCheckTimeout), Namespace: DefaultProbeNamespace}
				s.NodeCheck.apply(step.NodeCheck)
			}
			dst.Steps = append(dst.Steps, step)
		}
	}
	if r.RetireAfter != nil {
		dst.RetireAfter = *r.RetireAfter
	}
}

// validate checks every step of a ladder.
// MovesHolders says whether a step of the ladder moves other device holders: a node step the
// node's, a reset its reset domain's.
func (r Repair) MovesHolders() bool {
	for _, s := range r.Steps {
		if s.Holders == HoldersMove {
			return true
		}
	}
	return false
}

// ChecksNodes says whether a node step of the ladder has a node check: a node check that did not
// run keeps the node fenced until it runs.
func (r Repair) ChecksNodes() bool {
	for _, s := range r.Steps {
		if s.NodeCheck != nil {
			return true
		}
	}
	return false
}

func (r Repair) validate() error {
	if r.RetireAfter < 0 || r.RetireAfter > MaxRetireAfter {
		return fmt.Errorf("repair.retireAfter must be from 0 to %d (a device keeps its %d newest quarantines), got %d", MaxRetireAfter, MaxRetireAfter, r.RetireAfter)
	}
	for i, s := range r.Steps {
		if err := s.validate(); err != nil {
			return fmt.Errorf("repair.steps[%d]: %w", i, err)
		}
	}
	return nil
}

func (s RepairStep) validate() error {
	switch {
	case !slices.Contains(RepairKinds, s.Kind):
		return fmt.Errorf("unknown kind %q (known: %s, %s)", s.Kind, RepairReset, RepairNode)
	case s.Attempts < 1:
		return fmt.Errorf("attempts must be >= 1, got %d", s.Attempts)
	case s.Check.Timeout <= 0:
		return fmt.Errorf("timeout must be positive")
	case s.Kind == RepairReset && (s.Check.Image == "" || len(s.Check.Command) == 0):
		return fmt.Errorf("a %s step needs an image and a command", s.Kind)
	case s.Kind == RepairReset && s.Template != "":
		return fmt.Errorf("a %s step takes no template (it is a node step's)", s.Kind)
	case s.Kind == RepairReset && s.Holders != "" && s.Holders != HoldersWait && s.Holders != HoldersMove:
		return fmt.Errorf("holders %q: a %s step's holders (those of its reset domain's other devices) %s or %s", s.Holders, s.Kind, HoldersWait, HoldersMove)
	case s.Kind == RepairNode && (s.Check.Image != "" || len(s.Check.Command) > 0 || len(s.Check.NotRunExitCodes) > 0):
		return fmt.Errorf("a %s step runs no Pod: it takes a template, not an image, command or notRunExitCodes", s.Kind)
	case s.NodeCheck != nil && s.Kind != RepairNode:
		return fmt.Errorf("a %s step takes no nodeCheck (a node step's check across the node)", s.Kind)
	case s.NodeCheck != nil && (s.NodeCheck.Image == "" || len(s.NodeCheck.Command) == 0 || s.NodeCheck.Namespace == ""):
		return fmt.Errorf("nodeCheck needs an image and a command")
	case s.NodeCheck != nil && s.NodeCheck.Timeout <= 0:
		return fmt.Errorf("nodeCheck.timeout must be positive")
	case s.Kind == RepairNode && s.Holders != HoldersWait && s.Holders != HoldersMove && s.Holders != HoldersRemediator:
		return fmt.Errorf("holders %q: want %s, %s or %s", s.Holders, HoldersWait, HoldersMove, HoldersRemediator)
	case s.Kind == RepairNode:
		_, err := s.Object(NodeVars{Node: "node-0", Device: "gpu-0", Driver: "gpu.example.com", Pool: "node-0"})
		return err
	}
	return nil
}
