package rolloutplan

import "time"

// PhaseChange is what enabling a phase changed, so a rollback can undo exactly that.
type PhaseChange struct {
	Phase string       `json:"phase"`
	Nodes []NodeChange `json:"nodes"`
	// CreatedClasses are the DeviceClasses enable created (a rollback leaves them: bound claims
	// name them).
	CreatedClasses []string  `json:"createdClasses,omitempty"`
	At             time.Time `json:"at"`
	// Partial: an enable that failed, having switched none, some or all of the phase's nodes
	// (Nodes is empty): undoing it routes back the nodes its enable recorded a previous owner on.
	Partial bool `json:"partial,omitempty"`
}

// NodeChange is one node's ownership switch.
type NodeChange struct {
	Node string `json:"node"`
	// Previous is the ownership label's value before ("" with HadLabel false: it had none).
	Previous string `json:"previous"`
	HadLabel bool   `json:"hadLabel"`
	// PluginDevices is how many devices the plugin advertised before the switch.
	PluginDevices int64 `json:"pluginDevices"`
}

// Expected maps each switched node to the devices it had under the plugin (for the drift gate).
// A node the plugin advertised nothing on says nothing about its hardware and is left out.
func (c PhaseChange) Expected() map[string]int64 {
	out := map[string]int64{}
	for _, n := range c.Nodes {
		if n.PluginDevices > 0 {
			out[n.Node] = n.PluginDevices
		}
	}
	return out
}
