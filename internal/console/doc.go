// Package console serves DeviceWarden's read-only fleet page: which devices of which nodes are out,
// since when and why, what DeviceWarden does about each, and the breaker. It reads what
// DeviceWarden already keeps (Temporal visibility and the workflows' queries) and the cluster's
// ResourceSlices and Nodes, through one cache that asks Temporal at most once per refresh however
// many people look. It changes nothing.
package console
