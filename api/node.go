package api

import (
	"github.com/devicewarden/devicewarden/internal/escalation"
)

// NodeWorkflowID is the business key of a node's workflow.
func NodeWorkflowID(node string) string { return "node/" + node }

// NodeInput starts (or continues) a node's workflow.
type NodeInput struct {
	Node  string                `json:"node"`
	State *escalation.NodeState `json:"state,omitempty"`
}
