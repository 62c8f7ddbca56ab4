package api

import (
	"encoding/json"

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
	// Unit starts the workflow of a shared physical unit with its forms known (`device
	// quarantine` of one form of a partitionable GPU): its fence covers them all.
	Unit *device.Unit `json:"unit,omitempty"`
	// State is the workflow's own state, carried across continue-as-new; only the workflow reads it.
	State json.RawMessage `json:"state,omitempty"`
	// HistoryUnread says that State does not hold the device's history record (decision 0008):
	// the run that carried it started without a state and never read the record, so the next
	// reads it before its first event that may count it, as a run started afresh does.
	HistoryUnread bool `json:"historyUnread,omitempty"`
}
