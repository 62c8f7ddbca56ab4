// Package decide is a device's state machine, as pure functions: it takes health observations,
// operator commands and the results of actions, and returns the actions to take (taint, release,
// probe, canary, alert). A unit's forms, the recovery review and the record of every transition
// live here. It does no I/O: the device workflow performs the actions and reports their results.
package decide
