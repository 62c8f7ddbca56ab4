package policy

import (
	"fmt"
	"regexp"
)

// Signals are the health signals a fleet already runs that DeviceWarden reads beside Pod status
// and its drivers' slices: the queries it asks of a Prometheus that scrapes dcgm-exporter, and the
// node conditions Node Problem Detector (or a cloud's GPU plugin) sets. The policy file's
// signals section replaces either list.
type Signals struct {
	Prometheus     []PromSignal
	NodeConditions []NodeCondition
	// UUIDAttribute and IndexAttribute are the device attributes that carry a GPU's UUID and its
	// index on the node, by which a series or a condition message is mapped onto one device.
	UUIDAttribute  string
	IndexAttribute string
}

// PromSignal is one PromQL query that returns a series per GPU.
type PromSignal struct {
	// Name names the signal in cause codes, keys and metrics ("xid").
	Name  string `yaml:"name"`
	Query string `yaml:"query"`
	// Kind says what in a series is a fault: "last" (a gauge holding the last code, as the XID
	// gauge, which never goes back to zero: a new non-zero value), "count" (a counter: an
	// increase), or "level" (the query filters: a series that appears, or changes value).
	Kind string `yaml:"kind"`
	// CodeLabel names the label whose value is the fault's code ("xid"); without it a "last"
	// series' value is the code.
	CodeLabel string `yaml:"codeLabel"`
}

// Kinds of PromSignal.
const (
	PromLast  = "last"
	PromCount = "count"
	PromLevel = "level"
)

// NodeCondition is a node condition type that says a GPU of the node failed, when its status is
// True. A message that names a GPU (its UUID, or "GPU <index>") makes it that device's fault; one
// that names none is a signal about the node, which fences nothing by itself.
type NodeCondition struct {
	Type string `yaml:"type"`
}

// DefaultSignals are dcgm-exporter's fault series (those on by default, and those a fleet may
// turn on: the XID count, the health watch) and the GPU conditions AKS and GKE set.
func DefaultSignals() Signals {
	return Signals{
		Prometheus: []PromSignal{
			{Name: "xid", Query: "DCGM_FI_DEV_XID_ERRORS", Kind: PromLast},
			{Name: "xid-count", Query: "DCGM_EXP_XID_ERRORS_COUNT", Kind: PromCount, CodeLabel: "xid"},
			{Name: "row-remap-failure", Query: "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", Kind: PromLevel},
			{Name: "uncorrectable-remapped-rows", Query: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Kind: PromCount},
			{Name: "health", Query: "DCGM_EXP_GPU_HEALTH_STATUS >= 20", Kind: PromLevel, CodeLabel: "health_watch"},
			{Name: "recovery-action", Query: "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION > 0", Kind: PromLevel},
		},
		NodeConditions: []NodeCondition{{Type: "XIDErrors"}, {Type: "GPUMissing"}, {Type: "XidCriticalError"}},
		UUIDAttribute:  "uuid",
		IndexAttribute: "index",
	}
}

// signalsEntry is the file's signals section.
type signalsEntry struct {
	Prometheus     []PromSignal    `yaml:"prometheus"`
	NodeConditions []NodeCondition `yaml:"nodeConditions"`
	UUIDAttribute  string          `yaml:"uuidAttribute"`
	IndexAttribute string          `yaml:"indexAttribute"`
}

var signalName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// apply checks the section and lays it over the defaults.
func (e *signalsEntry) apply(def Signals) (Signals, error) {
	if e == nil {
		return def, nil
	}
	out := def
	if e.Prometheus != nil {
		seen := map[string]bool{}
		for i, q := range e.Prometheus {
			switch {
			case !signalName.MatchString(q.Name):
				return out, fmt.Errorf("signals.prometheus[%d]: name %q: want lower-case letters, digits and dashes (at most 32)", i, q.Name)
			case seen[q.Name]:
				return out, fmt.Errorf("signals.prometheus[%d]: name %q used twice", i, q.Name)
			case q.Query == "":
				return out, fmt.Errorf("signals.prometheus[%d] (%s): no query", i, q.Name)
			case q.Kind != PromLast && q.Kind != PromCount && q.Kind != PromLevel:
				return out, fmt.Errorf("signals.prometheus[%d] (%s): kind %q: want %s, %s or %s", i, q.Name, q.Kind, PromLast, PromCount, PromLevel)
			}
			seen[q.Name] = true
		}
		out.Prometheus = e.Prometheus
	}
	if e.NodeConditions != nil {
		for i, c := range e.NodeConditions {
			if c.Type == "" || c.Type == "Ready" {
				return out, fmt.Errorf("signals.nodeConditions[%d]: type %q: name a GPU condition (not Ready)", i, c.Type)
			}
		}
		out.NodeConditions = e.NodeConditions
	}
	if e.UUIDAttribute != "" {
		out.UUIDAttribute = e.UUIDAttribute
	}
	if e.IndexAttribute != "" {
		out.IndexAttribute = e.IndexAttribute
	}
	return out, nil
}

// Signals are the health signals the policy reads (DefaultSignals unless the file says).
func (s *Set) Signals() Signals {
	if s.signals == nil {
		return DefaultSignals()
	}
	return *s.signals
}
