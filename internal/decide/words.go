package decide

import (
	"slices"

	"github.com/devicewarden/devicewarden/internal/device"
)

// maxTaken bounds the one-time words a device's state keeps: a detector's words come one at a
// time, each withdrawn once taken, so only the newest can come again.
const maxTaken = 16

// wordsTaken says whether obs is Unhealthy by one-time words alone, every one of them taken
// before: no Pod's status and no standing report says Unhealthy.
func wordsTaken(st *DeviceState, obs Observation) bool {
	if obs.Health != device.Unhealthy || len(obs.Words) == 0 {
		return false
	}
	for _, w := range obs.Words {
		if !slices.Contains(st.Taken, w) {
			return false
		}
	}
	for _, r := range obs.Reporters {
		if r.Health == device.Unhealthy && r.Report == "" && r.Detector == "" {
			return false // a Pod's status, or the driver's own word, says so as well
		}
	}
	return true
}

// takeWords keeps the words an observation carried, the newest maxTaken.
func takeWords(st *DeviceState, words []string) {
	if st.rules.TakenWords {
		addTaken(st, words)
	}
}

// addTaken adds words the device took, once each, keeping the newest maxTaken.
func addTaken(st *DeviceState, words []string) {
	for _, w := range words {
		if !slices.Contains(st.Taken, w) {
			st.Taken = append(st.Taken, w)
		}
	}
	if n := len(st.Taken); n > maxTaken {
		st.Taken = slices.Clone(st.Taken[n-maxTaken:])
	}
}
