package rolloutplan

import "time"

// Snapshot is what a phase's checks read from the API, already cut down to the phase: its nodes,
// the devices its drivers publish on them, and the cluster's claims and Pending Pods.
type Snapshot struct {
	Now     time.Time    `json:"now"`
	Nodes   []Node       `json:"nodes"`
	Devices []Device     `json:"devices"`
	Claims  []Claim      `json:"claims"`
	Pending []PendingPod `json:"pending,omitempty"`
	// CapacityViolations are the shared-capacity invariant violations on the phase's devices.
	CapacityViolations []string `json:"capacityViolations,omitempty"`
}

// Node is one node the phase's selector matches.
type Node struct {
	Name string `json:"name"`
	// Owner is the node's ownership label value ("" when unset).
	Owner string `json:"owner"`
	// PluginDevices is how many of the plugin's extended resource the node advertises.
	PluginDevices int64 `json:"pluginDevices"`
	// Expected is how many devices the node had under the plugin when the phase switched it
	// (recorded by enable; -1 when not known).
	Expected int64 `json:"expected"`
}

// Device is one device a phase driver publishes in a ResourceSlice on a phase node.
type Device struct {
	Node   string `json:"node"`
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Name   string `json:"name"`
	// Shared is allowMultipleAllocations.
	Shared   bool                `json:"shared,omitempty"`
	Capacity map[string]Capacity `json:"capacity,omitempty"`
}

// Capacity is one consumable capacity of a shared device.
type Capacity struct {
	Value int64 `json:"value"`
	// Smallest is the smallest request the device's request policy accepts (its range minimum or
	// smallest valid value; 0 when any amount is accepted).
	Smallest int64 `json:"smallest,omitempty"`
}

// Claim is one ResourceClaim, reduced to what the gates need.
type Claim struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Classes   []string  `json:"classes"`
	Created   time.Time `json:"created"`
	// AllocatedAt is when the scheduler wrote the allocation (nil: not allocated).
	AllocatedAt *time.Time `json:"allocatedAt,omitempty"`
	// ReadyAt is when the first Pod using the claim became Ready (nil: none yet).
	ReadyAt *time.Time `json:"readyAt,omitempty"`
	Results []Result   `json:"results,omitempty"`
	// Orphaned: allocated, reserved for no Pod, and the Pod it was generated for is gone.
	Orphaned bool `json:"orphaned,omitempty"`
}

// Result is one allocated device of a claim.
type Result struct {
	Driver   string           `json:"driver"`
	Pool     string           `json:"pool"`
	Device   string           `json:"device"`
	Consumed map[string]int64 `json:"consumed,omitempty"`
}

// PendingPod is a Pod in a tenant namespace that waits for its claims.
type PendingPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Reason    string `json:"reason"`
	Message   string `json:"message"`
}

func deviceKey(driver, pool, name string) string { return driver + "/" + pool + "/" + name }
