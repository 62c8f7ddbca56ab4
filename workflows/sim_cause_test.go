package workflows

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/activities/remediation"
	fault "github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// causeModel holds the device workflow to what a fault's cause may do: an application's fault
// never fences (until as many as the policy's limit were sent within its window); a replace fault
// is retired with no step run; a reset- or reboot-first fault's first try is that step; and every
// cause a record keeps is one a source said.
type causeModel struct {
	causes policy.Causes
	// sent are the causes of the Unhealthy observations sent, with when.
	sent []sentCause
	// told counts the application faults the tenants were told of; toldAt are when, since the
	// last permit or fence for a fault (a pile of them fences the device and starts the count
	// anew; a device's own fault may not, so the count here is at most the workflow's).
	told   int
	toldAt []time.Time
	// nodeVerdict: a source said a node step is needed (a standing recovery action, or an
	// Unhealthy report whose cause starts at the node), which may move a ladder to its node step.
	nodeVerdict bool
}

type sentCause struct {
	c  fault.Cause
	at time.Time
}

// simCauses are the causes an Unhealthy observation may carry: mostly none, and one of each kind.
var simCauses = []*fault.Cause{nil, nil, nil, {XID: 13}, {Code: "xid:48", XID: 48}, {XID: 79, PCI: "0000:3b:00"},
	{Code: "row-remap-failure"}, {XID: 79, Recovery: fault.RecoveryGPUReset}}

// draw is the cause of an Unhealthy observation.
func (cm *causeModel) draw(rt *rapid.T, i int) *fault.Cause {
	return rapid.SampledFrom(simCauses).Draw(rt, fmt.Sprintf("cause%d", i))
}

func (cm *causeModel) observed(c *fault.Cause, standing []string, at time.Time) {
	if c != nil {
		cm.sent = append(cm.sent, sentCause{*c, at})
		if fault.Choose(*c, cm.causes).First == policy.FirstNode {
			cm.nodeVerdict = true
		}
	}
	for _, w := range standing {
		_, code, _ := strings.Cut(w, ": ")
		if fault.Choose(fault.OfCode(code), cm.causes).First == policy.FirstNode {
			cm.nodeVerdict = true
		}
	}
}

// appSent counts the application faults sent by at. The workflow counts those within its window
// before its decision, which a breaker may hold past the window: never more than these.
func (cm *causeModel) appSent(at time.Time) int {
	n := 0
	for _, s := range cm.sent {
		if fault.Choose(s.c, cm.causes).First == policy.FirstNone && !s.at.After(at) {
			n++
		}
	}
	return n
}

// check holds every quarantine record of the state to its cause.
func (cm *causeModel) check(m *deviceModel, after string, st *decide.DeviceState) {
	recs := append([]decide.QuarantineRecord(nil), st.Closed...)
	if st.Quarantine != nil {
		recs = append(recs, *st.Quarantine)
	}
	for _, q := range recs {
		ch := q.Choice
		if ch == nil {
			continue // a person's fence, a restriction, or a run before causes
		}
		if ch.First == policy.FirstNone {
			m.violate("after %s: a fence for an application's fault (%s)", after, q.Reason)
		}
		if q.Cause != nil && !cm.said(*q.Cause) {
			m.violate("after %s: the record keeps cause %+v, which no source said", after, *q.Cause)
		}
		var c fault.Cause
		if q.Cause != nil {
			c = *q.Cause
		}
		want := fault.Choose(c, cm.causes)
		piled := strings.Contains(ch.Why, "application faults within")
		switch {
		case piled && cm.appSent(q.CreatedAt) < cm.causes.AppFaultLimit().Limit:
			m.violate("after %s: fenced for %s, but only %d application faults were sent", after, ch.Why, cm.appSent(q.CreatedAt))
		case !piled && (want.First != ch.First || want.Why != ch.Why):
			m.violate("after %s: the record chose %s (%s) for cause %+v, want %s (%s)", after, ch.First, ch.Why, c, want.First, want.Why)
		}
		var tries []decide.RepairTry
		var passed []policy.RepairKind
		if q.Ladder != nil {
			tries, passed = q.Ladder.Tries, q.Ladder.SourcesSkipped
		}
		if len(passed) > 0 && !cm.nodeVerdict {
			m.violate("after %s: the ladder passed over %v for its sources, but no source asked for a node step", after, passed)
		}
		switch {
		case ch.First == policy.FirstRetire && len(tries) > 0:
			m.violate("after %s: a replace fault (%s) was repaired with %s", after, c, tries[0].Kind)
		case (ch.First == policy.FirstReset || ch.First == policy.FirstNode) && len(tries) > 0 && slices.Contains(m.ladder.kinds, policy.RepairKind(ch.First)) && tries[0].Kind != policy.RepairKind(ch.First) && !slices.Contains(passed, policy.RepairKind(ch.First)):
			m.violate("after %s: cause %s chose %s first, but the first try was %s", after, c, ch.First, tries[0].Kind)
		}
	}
}

func (cm *causeModel) said(c fault.Cause) bool {
	for _, s := range cm.sent {
		if s.c == c {
			return true
		}
	}
	return false
}

// activities answers the activity an application's fault takes.
func (cm *causeModel) activities(env *testsuite.TestWorkflowEnvironment, m *deviceModel) {
	env.OnActivity("NoteAppFault", mock.Anything, mock.Anything).Return(func(_ context.Context, in remediation.AppFaultInput) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		cm.told++
		m.note("NoteAppFault: %s", in.Reason)
		cm.counted(m, in.Reason, env.Now())
		return nil
	}).Maybe()
}

// appCount reads the count an application fault's reason gives: "(3 of 5 within 1h0m0s fence it)".
var appCount = regexp.MustCompile(`\((\d+) of \d+ within \S+ fence it\)`)

// counted holds the workflow's count of application faults to those it told of before, in this
// run or an earlier one: a run that ended idle leaves its faults to the next (its history), and
// a count that starts again from one lets a bad GPU hide behind application errors. Faults near
// the window's edge are left out of what the workflow must count.
func (cm *causeModel) counted(m *deviceModel, reason string, now time.Time) {
	defer func() { cm.toldAt = append(cm.toldAt, now) }()
	got := appCount.FindStringSubmatch(reason)
	if got == nil {
		m.violate("an application fault's reason gives no count: %q", reason)
		return
	}
	n, _ := strconv.Atoi(got[1])
	window := cm.causes.AppFaultLimit().Window.D()
	want := 1
	for _, at := range cm.toldAt {
		if at.After(now.Add(-window + time.Minute)) {
			want++
		}
	}
	if n < want {
		m.violate("an application fault counted as %d within %s, but %d were told of within it before: earlier faults forgotten", n, window, want-1)
	}
}

// fenced starts the count anew: the permit or fence may be a pile of application faults'.
func (cm *causeModel) fenced() { cm.toldAt = nil }
