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
	// Condition, with Device empty, is a node condition that says a GPU failed without naming
	// one (Node Problem Detector's XIDErrors, GPUMissing): a word about the node, which fences
	// nothing by itself. Message is the condition's.
	Condition string `json:"condition,omitempty"`
	Message   string `json:"message,omitempty"`
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
	// Conditions are the node conditions that named no device ("<type>: <message>"), each once.
	Conditions []string `json:"conditions,omitempty"`
}

// Fail records a failed device; it returns an alert when this failure escalates the node.
func (n *NodeState) Fail(f NodeFailure, now time.Time) []decide.Action {
	n.Node = f.Node
	if f.Device == "" {
		return n.condition(f)
	}
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

// condition records a node condition that named no device, and alerts once for each: people and
// node failure handling decide about the node; no device is fenced for it.
func (n *NodeState) condition(f NodeFailure) []decide.Action {
	if f.Condition == "" {
		return nil
	}
	word := f.Condition + ": " + f.Message
	if slices.Contains(n.Conditions, word) {
		return nil
	}
	n.Conditions = append(n.Conditions, word)
	reason := fmt.Sprintf("node %s reports %s without naming a GPU (%s): recorded for the node, no device fenced; %d of its devices failed so far",
		n.Node, f.Condition, f.Message, len(n.Failed))
	return []decide.Action{{Kind: decide.ActAlert, Level: "warning", Reason: reason}}
}
