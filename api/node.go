package api

import "github.com/devicewarden/devicewarden/internal/policy"

// NodeWorkflowID is the business key of a node's workflow.
func NodeWorkflowID(node string) string { return "node/" + node }

// NodeInput starts (or continues) a node's workflow.
type NodeInput struct {
	Node  string            `json:"node"`
	State *policy.NodeState `json:"state,omitempty"`
}
