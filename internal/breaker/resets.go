package breaker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// DefaultResetHold is how long a reset's permit lasts unless its step ends first (and gives it
// back): a worker that died mid-reset frees its place in the end.
const DefaultResetHold = 15 * time.Minute

// DefaultMaxResetFailures is how many failed resets within the window stop resets, unless the
// configuration says.
const DefaultMaxResetFailures = 3

// ResetFailuresMax is the failed resets within the window that stop resets.
func (c Config) ResetFailuresMax() int {
	if c.MaxResetFailures > 0 {
		return c.MaxResetFailures
	}
	return DefaultMaxResetFailures
}

// ResetFailure is a reset that ran and did not bring its device back.
type ResetFailure struct {
	Device string    `json:"device"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// acquireReset grants a repair step's reset (ResetsAtATime): at most Config.Resets() run at a
// time, whatever the window, so a storm of faults is reset as fast as the budget allows. The
// permit lasts until the step gives it back (ResetEnded) or its hold ends. While failed resets
// hold resets (a reset tool that fails every device), none is granted.
func (b *State) acquireReset(req PermitRequest, key string, now time.Time) PermitResult {
	if b.ResetsHeld {
		b.Denied++
		return PermitResult{Reason: "resets held: " + b.ResetsHeldReason}
	}
	running := b.resetsRunning()
	if max := b.Config.Resets(); len(running) >= max {
		b.Denied++
		sort.Strings(running)
		b.waitReset(key)
		return PermitResult{Reason: fmt.Sprintf("reset budget spent: %d resets running (%s; max %d at a time); the device asks again when one ends",
			len(running), strings.Join(running, ", "), max)}
	}
	b.ResetWaiting = slices.DeleteFunc(b.ResetWaiting, func(d string) bool { return d == key })
	hold := req.Hold
	if hold <= 0 {
		hold = DefaultResetHold
	}
	b.Grants = append(b.Grants, Grant{Device: key, Action: Reset, At: now, Holder: req.Device.String(), Until: now.Add(hold)})
	return PermitResult{Granted: true}
}

// resetsRunning are the devices holding a reset's permit now (counted at a time).
func (b *State) resetsRunning() []string {
	var running []string
	for _, g := range b.Grants {
		if g.Action == Reset && !g.Until.IsZero() {
			running = append(running, g.Device)
		}
	}
	return running
}

// ResetEnded gives a reset's permit back and, when the reset failed, counts it (once: only a
// release that gave a permit back, or found it lapsed within the window, counts): the failures
// within the window reaching Config.ResetFailuresMax() (in devices, with DeviceBrake) hold resets
// until a person resumes the breaker or the window passes them by. It returns the alert to send
// when it holds resets.
func (b *State) ResetEnded(rel PermitRelease, now time.Time) string {
	if b.DeviceBrake {
		b.prune(now) // a permit whose hold ended is lapsed, whether or not a request came since
	}
	released := b.Release(rel)
	if !released && b.DeviceBrake {
		released = b.dropLapsed(rel)
	}
	if !released || !rel.Failed || !b.ResetsAtATime {
		return "" // a release sent again, or for a permit long gone, counts once
	}
	b.pruneFailures(now)
	b.ResetFailures = append(b.ResetFailures, ResetFailure{Device: rel.Holder, Reason: rel.Reason, At: now})
	if b.ResetsHeld || b.failedResets() < b.Config.ResetFailuresMax() {
		return ""
	}
	var what []string
	for _, f := range b.ResetFailures {
		what = append(what, fmt.Sprintf("%s (%s)", f.Device, f.Reason))
	}
	failed := fmt.Sprintf("%d resets failed", len(b.ResetFailures))
	if b.DeviceBrake {
		failed = fmt.Sprintf("resets of %d devices failed", b.failedResets())
	}
	b.ResetsHeld = true
	b.ResetsHeldReason = fmt.Sprintf("%s within %s: %s; is the reset tool broken? Resets wait until a person resumes the breaker or the window passes",
		failed, b.Config.Window, strings.Join(what, "; "))
	return "resets held: " + b.ResetsHeldReason
}

// pruneFailures forgets failed resets older than the window; resets go on once too few are left.
func (b *State) pruneFailures(now time.Time) {
	cutoff := now.Add(-b.Config.Window)
	kept := b.ResetFailures[:0]
	for _, f := range b.ResetFailures {
		if f.At.After(cutoff) {
			kept = append(kept, f)
		}
	}
	b.ResetFailures = kept
	if b.ResetsHeld && b.failedResets() < b.Config.ResetFailuresMax() {
		b.ResetsHeld, b.ResetsHeldReason = false, ""
	}
}

// failedResets is what the brake counts of ResetFailures: the devices (DeviceBrake), or the resets.
func (b *State) failedResets() int {
	if !b.DeviceBrake {
		return len(b.ResetFailures)
	}
	devices := map[string]bool{}
	for _, f := range b.ResetFailures {
		devices[f.Device] = true
	}
	return len(devices)
}

// dropLapsed forgets the lapsed reset permit rel names, saying whether there was one: a reset
// that outran its hold still reports its end once.
func (b *State) dropLapsed(rel PermitRelease) bool {
	i := slices.IndexFunc(b.LapsedResets, func(g Grant) bool { return g.Device == rel.Key && g.Holder == rel.Holder })
	if i < 0 {
		return false
	}
	b.LapsedResets = slices.Delete(b.LapsedResets, i, i+1)
	return true
}

// maxLapsed bounds LapsedResets: a fleet of dead workers cannot grow the state without end.
const maxLapsed = 1000

// pruneLapsed forgets lapsed reset permits whose hold ended before the window.
func (b *State) pruneLapsed(cutoff time.Time) {
	b.LapsedResets = slices.DeleteFunc(b.LapsedResets, func(g Grant) bool { return !g.Until.After(cutoff) })
	if n := len(b.LapsedResets); n > maxLapsed {
		b.LapsedResets = slices.Delete(b.LapsedResets, 0, n-maxLapsed)
	}
}

// waitReset records a device refused a reset for the budget (once), to be woken when one ends.
func (b *State) waitReset(key string) {
	if b.WakesResets && len(b.ResetWaiting) < maxWaiting && !slices.Contains(b.ResetWaiting, key) {
		b.ResetWaiting = append(b.ResetWaiting, key)
	}
}

// WakeResets returns the devices refused a reset to wake now, oldest first: as many as there are
// free places under the budget; none while failed resets hold resets.
func (b *State) WakeResets() []string {
	if !b.WakesResets || b.ResetsHeld || len(b.ResetWaiting) == 0 {
		return nil
	}
	n := min(len(b.ResetWaiting), b.Config.Resets()-len(b.resetsRunning()))
	if n <= 0 {
		return nil
	}
	out := slices.Clone(b.ResetWaiting[:n])
	b.ResetWaiting = slices.Delete(b.ResetWaiting, 0, n)
	return out
}
