package capacity

// CheckInput asks for a shared-capacity check of the cluster (the hygiene activity
// CheckCapacity, and `devicewarden capacity check`).
type CheckInput struct {
	// Tenants restricts the classes some namespaces may claim.
	Tenants map[string][]string `json:"tenants,omitempty"`
	// Record writes the grant-time policy record of allocated claims that have none yet (in
	// DeviceWarden's namespace) and deletes the records of claims that are gone.
	Record bool `json:"record,omitempty"`
}

// CheckReport is what a check found.
type CheckReport struct {
	Claims     int         `json:"claims"`
	Devices    int         `json:"devices"`
	Violations []Violation `json:"violations,omitempty"`
	// Recorded is how many claims got their grant snapshot in this check.
	Recorded int `json:"recorded,omitempty"`
	// Unknown are the allocations on nodes that stopped renewing their Lease and were not fenced:
	// not reclaimable, their capacity still counted as used.
	Unknown []Finding `json:"unknown,omitempty"`
}

// FenceInput confirms that a node is down for good (or, with Undo, takes that back).
type FenceInput struct {
	Node  string `json:"node"`
	Actor string `json:"actor"`
	Undo  bool   `json:"undo,omitempty"`
}
