package kubeobj

import (
	"crypto/sha256"
	"encoding/hex"
)

// A device's history outlives its workflow run (decision 0008) in one ConfigMap per node in
// DeviceWarden's namespace, HistoryName(node), labelled LabelHistory: under HistoryKey a JSON
// object of device ID to its closed quarantines and application faults; under HistoryUnreadableKey
// entries that did not decode (edited by hand), kept aside.
const (
	HistoryKey           = "devices.json"
	HistoryUnreadableKey = "unreadable.json"
	LabelHistory         = "devicewarden.io/history"
	// AnnotationHistoryNode names the node a record is for (its name may be cut short).
	AnnotationHistoryNode = "devicewarden.io/node"
)

// HistoryName is a node's history record: devicewarden-history-<node>, or the node name's start
// and a hash of it where the whole would pass the 253 characters of an object name.
func HistoryName(node string) string {
	const prefix = "devicewarden-history-"
	if node == "" {
		return "devicewarden-history"
	}
	if len(prefix)+len(node) <= 253 {
		return prefix + node
	}
	sum := sha256.Sum256([]byte(node))
	return prefix + node[:253-len(prefix)-17] + "-" + hex.EncodeToString(sum[:8])
}
