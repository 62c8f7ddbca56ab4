package remediation

// The activities' helpers, by concept, each a view of the same Activities: the activities stay
// methods of Activities (their names are in every recorded history), and what each does is found
// with its own kind.

// domains are a reset's domain: its fences, its permit, and the devices a failed reset reached.
type domains struct{ a *Activities }

// nodeSteps are a node step's remediator objects, its reboot, its holders and its node check.
type nodeSteps struct{ a *Activities }

// checkPods run a probe, canary or repair step's Pod, and say whether a device is idle.
type checkPods struct{ a *Activities }

// ruleWriter writes, inspects and hands over the quarantine's DeviceTaintRules.
type ruleWriter struct{ a *Activities }

// permitBook keeps the breaker's side of the worker: node and reset permits, and the device count.
type permitBook struct{ a *Activities }

// alertHolder holds alerts the breaker held, and sends them together.
type alertHolder struct{ a *Activities }
