// Package healthreport reads DeviceHealthReports: one detector's word about one device (an XID a
// DCGM exporter saw, an NVSentinel health event, a node condition that names a GPU), written in
// DeviceWarden's API group by any tool allowed to create them. It checks a report and resolves it
// to exactly one published device, or says why it cannot; it does no I/O.
package healthreport

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
)

// The report's API: a cluster-scoped resource with a status subresource.
const (
	Group    = "devicewarden.io"
	Version  = "v1alpha1"
	Kind     = "DeviceHealthReport"
	Resource = "devicehealthreports"
)

// Report is one DeviceHealthReport as DeviceWarden reads it.
type Report struct {
	Name       string
	Generation int64
	Spec       Spec
	Status     Status
}

// Spec is what a detector says of one device. It names the device exactly (Device), or by an
// attribute its driver publishes (a GPU UUID, a PCI bus ID) on a node.
type Spec struct {
	Device *DeviceRef `json:"device,omitempty"`
	// Node, Driver and Attribute name a device by what its driver publishes of it; Driver may be
	// left out when one driver's device on the node carries the value.
	Node      string     `json:"node,omitempty"`
	Driver    string     `json:"driver,omitempty"`
	Attribute *Attribute `json:"attribute,omitempty"`
	// Health is Unhealthy, Unknown or Healthy (a detector taking its word back).
	Health  string `json:"health"`
	Cause   Cause  `json:"cause,omitempty"`
	Message string `json:"message,omitempty"`
	// Source names the detector ("nvsentinel", "dcgm", "npd"): each source's last word is kept.
	Source       string       `json:"source"`
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}

// DeviceRef names a device as DRA does: its driver, its pool and its name in the pool.
type DeviceRef struct {
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Name   string `json:"name"`
}

// Attribute is one attribute of a published device and the value it must have.
type Attribute struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Cause is why the detector reports the device: a code ("xid:79") and the action it recommends,
// when it has one ("COMPONENT_RESET").
type Cause struct {
	Code              string `json:"code,omitempty"`
	RecommendedAction string `json:"recommendedAction,omitempty"`
	// RecoveryAction is the driver's verdict for the GPU when the detector read it (NVML's GPU
	// recovery action, by number or name: "1", "gpu-reset"); it chooses the first repair step.
	RecoveryAction string `json:"recoveryAction,omitempty"`
}

// Status is what DeviceWarden made of a report.
type Status struct {
	// Outcome is Resolved (a standing word: Unknown or Healthy), Delivered (a fault, which the
	// device's workflow has) or Refused.
	Outcome string `json:"outcome,omitempty"`
	// Device and Workflow name the device the report was resolved to and its workflow.
	Device   string `json:"device,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	// Reason says why a report was refused.
	Reason             string `json:"reason,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
}

// Outcomes.
const (
	Resolved  = "Resolved"
	Delivered = "Delivered"
	Refused   = "Refused"
)

// DeviceWarden's own reports: one for each device a failed reset of its domain reached, which
// the watcher delivers like any detector's.
const (
	// OwnSource is the source DeviceWarden's own reports name.
	OwnSource = "devicewarden"
	// CodeResetFailed is their cause code. No rule of the shipped catalogue names it: such a
	// device's first step is its ladder's first, unless the policy's causes say otherwise.
	CodeResetFailed = "reset-domain-failed"
)

// MaxMessage bounds a report's message, as the schema does.
const MaxMessage = 1024

// FromObject reads a report from its unstructured form (a watch event's object).
func FromObject(obj map[string]any) (Report, error) {
	var r struct {
		Metadata struct {
			Name       string `json:"name"`
			Generation int64  `json:"generation"`
		} `json:"metadata"`
		Spec   Spec   `json:"spec"`
		Status Status `json:"status"`
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &r); err != nil {
		return Report{}, fmt.Errorf("report does not decode: %w", err)
	}
	return Report{Name: r.Metadata.Name, Generation: r.Metadata.Generation, Spec: r.Spec, Status: r.Status}, nil
}

// HealthOf is the report's health, or why it is not one DeviceWarden knows.
func (s Spec) HealthOf() (device.Health, error) {
	h, err := device.ParseHealth(s.Health)
	if err != nil {
		return "", fmt.Errorf("%w: want Unhealthy, Unknown or Healthy", err)
	}
	return h, nil
}

// Check says why a report cannot be acted on, before any device is looked for: an unknown health
// word, no source, or no device named.
func (s Spec) Check() error {
	if _, err := s.HealthOf(); err != nil {
		return err
	}
	if strings.TrimSpace(s.Source) == "" {
		return fmt.Errorf("names no source: say which detector reports (spec.source)")
	}
	if a := s.Cause.RecoveryAction; a != "" {
		if _, ok := cause.ParseRecovery(a); !ok {
			return fmt.Errorf("cause.recoveryAction %q: want NVML's GPU recovery action, by number (0 to 7) or name (none, gpu-reset, node-reboot, drain-p2p, drain-and-reset, ...)", a)
		}
	}
	switch {
	case s.Device != nil && s.Attribute != nil:
		return fmt.Errorf("names its device twice: give spec.device, or spec.node with spec.attribute, not both")
	case s.Device != nil:
		if s.Device.Driver == "" || s.Device.Pool == "" || s.Device.Name == "" {
			return fmt.Errorf("names no device: spec.device needs its driver, pool and name")
		}
	case s.Attribute != nil:
		if s.Node == "" || s.Attribute.Name == "" || s.Attribute.Value == "" {
			return fmt.Errorf("names no device: spec.attribute needs a name, a value and spec.node")
		}
	default:
		return fmt.Errorf("names no device: give spec.device, or spec.node with spec.attribute")
	}
	return nil
}

// CauseOf is what the report says made the fault: its code, recommended action and recovery
// action, and an XID its message gives.
func (s Spec) CauseOf() cause.Cause {
	c := cause.Read(s.Cause.Code, s.Cause.RecommendedAction, s.Message)
	if r, ok := cause.ParseRecovery(s.Cause.RecoveryAction); ok {
		c.Recovery = r
	}
	return c
}

// What is the report's cause and message in one line, for the device's record.
func (s Spec) What() string {
	var parts []string
	if c := s.Cause.Code; c != "" {
		parts = append(parts, c)
	}
	if m := strings.TrimSpace(s.Message); m != "" {
		parts = append(parts, m)
	}
	if a := s.Cause.RecommendedAction; a != "" {
		parts = append(parts, "recommended: "+a)
	}
	if r, ok := cause.ParseRecovery(s.Cause.RecoveryAction); ok {
		parts = append(parts, "recovery action: "+string(r))
	}
	return s.Source + ": " + strings.Join(parts, "; ")
}

// Object is a report named name with spec s in its unstructured form, to create: DeviceWarden
// writes one itself for each device a failed reset reached.
func (s Spec) Object(name string) (map[string]any, error) {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return nil, fmt.Errorf("report %s does not encode: %w", name, err)
	}
	return map[string]any{"apiVersion": Group + "/" + Version, "kind": Kind, "metadata": map[string]any{"name": name}, "spec": spec}, nil
}
