// Package workflows holds DeviceWarden's deterministic orchestration. Nothing here does I/O:
// every side effect is an activity in package activities.
package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Task queue, signal, query and search attribute names. Operators and the Temporal CLI use these.
const (
	TaskQueue = "devicewarden"

	// SignalObservation delivers a health Observation from the watcher.
	SignalObservation = "observation"
	// QueryState returns the DeviceState.
	QueryState = "state"
)

// Search attributes (Keyword) the device workflow sets; registered at start.
var (
	SearchDeviceID     = temporal.NewSearchAttributeKeyKeyword("DeviceID")
	SearchDeviceNode   = temporal.NewSearchAttributeKeyKeyword("DeviceNode")
	SearchDeviceDriver = temporal.NewSearchAttributeKeyKeyword("DeviceDriver")
	SearchDeviceState  = temporal.NewSearchAttributeKeyKeyword("DeviceState")
)

// SearchAttributeNames lists every custom search attribute, for registration.
var SearchAttributeNames = []string{"DeviceID", "DeviceNode", "DeviceDriver", "DeviceState"}

// Reporter says which pod, container and claim reported a health value.
type Reporter struct {
	Namespace string        `json:"namespace"`
	Pod       string        `json:"pod"`
	Container string        `json:"container"`
	Claim     string        `json:"claim"`
	Health    device.Health `json:"health"`
}

// Observation is one aggregated health report for one device.
type Observation struct {
	Device device.ID     `json:"device"`
	Node   string        `json:"node"`
	Health device.Health `json:"health"`
	// Message is the driver's message of the worst report, if any.
	Message string `json:"message,omitempty"`
	// StatusVersion is the resourceVersion of the Pod status that carried the report.
	StatusVersion string     `json:"statusVersion"`
	ObservedAt    time.Time  `json:"observedAt"`
	Reporters     []Reporter `json:"reporters,omitempty"`
}

// DeviceInput starts a device workflow.
type DeviceInput struct {
	Device device.ID `json:"device"`
	Node   string    `json:"node"`
	// DryRun makes quarantine rules use effect None (preview only).
	DryRun bool `json:"dryRun,omitempty"`
	// State carries the state across continue-as-new.
	State *DeviceState `json:"state,omitempty"`
}

// Device states.
const (
	StateHealthy     = "Healthy"
	StateQuarantined = "Quarantined"
)

// QuarantineRecord is the auditable record of a quarantine.
type QuarantineRecord struct {
	RuleName  string    `json:"ruleName"`
	Reason    string    `json:"reason"`
	Actor     string    `json:"actor"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Transition records a state change and why.
type Transition struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// DeviceState is what the `state` query returns.
type DeviceState struct {
	Device        device.ID         `json:"device"`
	Node          string            `json:"node"`
	State         string            `json:"state"`
	Health        device.Health     `json:"health"`
	Message       string            `json:"message,omitempty"`
	StatusVersion string            `json:"statusVersion,omitempty"`
	ObservedAt    time.Time         `json:"observedAt"`
	Reporters     []Reporter        `json:"reporters,omitempty"`
	Quarantine    *QuarantineRecord `json:"quarantine,omitempty"`
	Transitions   []Transition      `json:"transitions,omitempty"`
	// Ignored counts observations dropped as duplicates or older than the last one.
	Ignored int `json:"ignored"`
}
