package cli

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// printDevice writes the device's state for a person: the summary line first, then the record,
// the last reports and the recent transitions.
func printDevice(out io.Writer, st *devicemsg.DeviceView) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "Device:\t%s\n", st.Device)
	fmt.Fprintf(w, "Node:\t%s\n", st.Node)
	if u := st.Unit; u != nil {
		whole := u.Whole
		if whole == "" {
			whole = "none (probes run on every form)"
		}
		fmt.Fprintf(w, "Physical unit:\t%s: %d forms, whole device %s\n", u.ID, len(u.Devices), whole)
		fmt.Fprintf(w, "Forms:\t%s\n", strings.Join(u.Devices, ", "))
	}
	fmt.Fprintf(w, "State:\t%s\n", deviceSummary(st))
	fmt.Fprintf(w, "Policy:\t%s (lease %s, stability %s, approval required %t)\n", st.Policy.Name, st.Policy.QuarantineLease, st.Policy.StabilityWindow, st.Policy.ApprovalRequired)
	fmt.Fprintf(w, "Last report:\t%s %s (status version %s, %s)\n", st.Health, st.Message, st.StatusVersion, ts(st.ObservedAt))
	if q := st.Quarantine; q != nil {
		fmt.Fprintf(w, "Quarantine:\trule %s, effect %s, by %s at %s, expires %s, reviews %d\n", q.RuleName, q.Effect, q.Actor, ts(q.CreatedAt), ts(q.ExpiresAt), q.Reviews)
		fmt.Fprintf(w, "Reason:\t%s\n", q.Reason)
		if q.Cause != "" || q.First != "" {
			fmt.Fprintf(w, "Cause:\t%s\n", cmp.Or(q.Cause, "not said"))
			fmt.Fprintf(w, "First step:\t%s (%s)\n", q.First, q.FirstWhy)
		}
		if q.Ladder != nil {
			printLadder(w, q.Ladder, ts)
		}
	}
	if r := st.Review; r != nil {
		fmt.Fprintf(w, "Review:\tstage %s since %s (%s)\n", r.Stage, ts(r.StartedAt), r.Trigger)
		if r.ProbeWith != "" {
			fmt.Fprintf(w, "Review probe:\t%s (after %s)\n", r.ProbeWith, cmp.Or(r.After, "no step"))
		}
	}
	if p := st.LastProbe; p != nil {
		fmt.Fprintf(w, "Last probe:\tpassed=%t %s (%s)\n", p.Passed, p.Reason, ts(p.At))
	}
	if n := st.NotRun; n != nil {
		fmt.Fprintf(w, "Not run:\t%s, %d in a row, again at %s: the tooling failed, not the device (%s)\n", n.Kind, n.Count, ts(n.RetryAt), n.Reason)
	}
	for _, rep := range st.Reporters {
		on := ""
		if rep.Device != "" {
			on = " on " + rep.Device
		}
		switch {
		case rep.Report != "":
			fmt.Fprintf(w, "Reported by:\t%s, DeviceHealthReport %s%s: %s\n", rep.Detector, rep.Report, on, rep.Health)
		case rep.Slice != "":
			fmt.Fprintf(w, "Reported by:\tits driver, ResourceSlice %s%s: %s\n", rep.Slice, on, rep.Health)
		default:
			fmt.Fprintf(w, "Reported by:\t%s/%s container %s claim %s%s: %s\n", rep.Namespace, rep.Pod, rep.Container, rep.Claim, on, rep.Health)
		}
	}
	if len(st.Standing) > 0 {
		fmt.Fprintf(w, "Still reported:\t%s (a release waits for it)\n", strings.Join(st.Standing, ", "))
	}
	for _, c := range st.Closed {
		fmt.Fprintf(w, "Closed:\t%s by %s: %s\n", ts(c.ClosedAt), c.ClosedBy, c.CloseReason)
		if c.Ladder != nil && len(c.Ladder.Tries) > 0 {
			fmt.Fprintf(w, "  repaired in:\t%s (%d repair tries)\n", c.ClosedAt.Sub(c.CreatedAt).Round(time.Second), len(c.Ladder.Tries))
		}
	}
	if st.AppFaults > 0 {
		fmt.Fprintf(w, "Application faults:\t%d, %d of them within the policy's window (the device stayed in service)\n", st.AppFaults, st.AppFaultsRecent)
	}
	if st.Dropped > 0 {
		fmt.Fprintf(w, "Dropped commands:\t%d (last: %s)\n", st.Dropped, st.LastDropped)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "Recent transitions:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	from := max(0, len(st.Transitions)-10)
	for _, t := range st.Transitions[from:] {
		fmt.Fprintf(tw, "  %s\t%s -> %s\t%s\t%s\n", ts(t.At), t.From, t.To, t.Actor, t.Reason)
	}
	return tw.Flush()
}

// printLadder writes each repair try of a quarantine and what followed it.
func printLadder(w io.Writer, l *devicemsg.LadderView, ts func(time.Time) string) {
	if len(l.Tries) == 0 {
		fmt.Fprintf(w, "Repair:\tnot started (waits until no Pod holds the device)\n")
	}
	for _, t := range l.Tries {
		res := "running"
		if t.Result != nil {
			res = fmt.Sprintf("passed=%t %s", t.Result.Passed, t.Result.Reason)
		}
		if t.Review != "" {
			res += "; review: " + t.Review
		}
		fmt.Fprintf(w, "Repair:\t%s %s attempt %d: %s\n", ts(t.At), t.Kind, t.Attempt, res)
	}
}

// deviceSummary is the view's summary line; a worker of an earlier release answers without one.
func deviceSummary(st *devicemsg.DeviceView) string {
	if st.Summary == "" {
		return string(st.State)
	}
	return st.Summary
}
