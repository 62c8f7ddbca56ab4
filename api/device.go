package api

import (
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// DeviceInput starts a device workflow.
type DeviceInput struct {
	Device device.ID     `json:"device"`
	Node   string        `json:"node"`
	Policy policy.Policy `json:"policy"`
	// DryRun makes every taint use effect None (preview only).
	DryRun bool `json:"dryRun,omitempty"`
	// State carries the state across continue-as-new.
	State *decide.DeviceState `json:"state,omitempty"`
}
