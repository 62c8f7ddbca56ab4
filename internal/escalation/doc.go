// Package escalation is a node's state: which of its devices failed, and whether that reached the
// policy's threshold for one node-level decision. DeviceWarden never cordons; an escalation is a
// record and an alert.
package escalation
