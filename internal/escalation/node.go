package escalation

import (
	"fmt"
	"slices"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
)

// NodeFailure tells a node's workflow that one of its devices was quarantined or restricted.
type NodeFailure struct {
	Node      string       `json:"node"`
	Device    string       `json:"device"`
	State     decide.State `json:"state"`
	Threshold int          `json:"threshold"`
}

// NodeState is what a node's workflow knows: which of its devices failed, and whether that
// escalated to a node-level decision. DeviceWarden never cordons: escalation is a record and an
// alert for node failure handling and people.
type NodeState struct {
	Node        string    `json:"node"`
	Failed      []string  `json:"failed"`
	Threshold   int       `json:"threshold"`
	Escalated   bool      `json:"escalated"`
	EscalatedAt time.Time `json:"escalatedAt,omitempty"`
	Reason      string    `json:"reason,omitempty"`
}

// Fail records a failed device; it returns an alert when this failure escalates the node.
func (n *NodeState) Fail(f NodeFailure, now time.Time) []decide.Action {
	n.Node = f.Node
	if f.Threshold > 0 {
		n.Threshold = f.Threshold
	}
	if !slices.Contains(n.Failed, f.Device) {
		n.Failed = append(n.Failed, f.Device)
		slices.Sort(n.Failed)
	}
	if n.Escalated || n.Threshold < 1 || len(n.Failed) < n.Threshold {
		return nil
	}
	n.Escalated, n.EscalatedAt = true, now
	n.Reason = fmt.Sprintf("%d devices on node %s failed (threshold %d): escalated to a node-level decision; cordon and drain are left to node failure handling",
		len(n.Failed), n.Node, n.Threshold)
	return []decide.Action{{Kind: decide.ActAlert, Level: "critical", Reason: n.Reason}}
}
