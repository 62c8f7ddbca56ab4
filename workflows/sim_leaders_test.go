package workflows

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/testsuite"
	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// TestSimulateDeviceLeaders runs the device workflow's sequences with detectors' one-time words
// (a node condition naming the GPU, a report) among the reports, and new leaders that send the
// newest word again, as a watcher does whose predecessor delivered it before the handover. Beside
// the device workflow's invariants: a word the device took, sent again, never fails the review in
// progress.
func TestSimulateDeviceLeaders(t *testing.T) { simulate(t, 200, leadersProperty) }

func leadersProperty(rt *rapid.T) { runDevice(rt, nil, simMode{leaders: true}) }

// resend is a leader's resend of the newest word, with what the workflow held just before it.
type resend struct {
	word       string
	recovering bool // a review was in progress
	taken      bool // the workflow had taken the word
}

// wordStep is a detector's new one-time word: the device Unhealthy by the detector alone, with
// the Pod that holds it (if one does) saying nothing against it.
func (m *deviceModel) wordStep(id device.ID, i, ver int, term int64, seq uint64, s step) step {
	word := fmt.Sprintf("word-%d", i)
	s.what = fmt.Sprintf("a detector's word %s: Unhealthy v%d term %d", word, ver, term)
	o := decide.Observation{Device: id, Node: "node-1", Health: device.Unhealthy, StatusVersion: fmt.Sprint(ver),
		Source: devicemsg.SourceHealthReport, Seq: &decide.Seq{Term: term, N: seq}, Words: []string{word},
		Reporters: []decide.Reporter{{Report: "node-condition", Detector: "npd", Health: device.Unhealthy}}}
	s.do = func(env *testsuite.TestWorkflowEnvironment) {
		o.ObservedAt = env.Now()
		m.mu.Lock()
		o.Reporters = m.withHolder(o.Reporters[:1], env)
		m.unhealthySeen, m.reported = true, true
		m.standing, m.standingSeq = false, *o.Seq
		m.sourcesSay(*o.Seq, device.Unhealthy, env.Now())
		sent := o
		m.lastWord = &sent
		m.mu.Unlock()
		m.signal(env, api.SignalObservation, o)
	}
	return s
}

// resendStep is a new leader's: it sends the newest word again, with its own order and version.
func (m *deviceModel) resendStep(ver int, term int64, seq uint64, s step) step {
	s.what = fmt.Sprintf("a new leader (term %d) sends the newest word again", term)
	s.do = func(env *testsuite.TestWorkflowEnvironment) {
		m.mu.Lock()
		if m.lastWord == nil {
			m.mu.Unlock()
			return
		}
		o := *m.lastWord
		o.StatusVersion, o.Seq, o.ObservedAt = fmt.Sprint(ver), &decide.Seq{Term: term, N: seq}, env.Now()
		// The new leader names the holders it sees now, beside the word it sends again.
		o.Reporters = m.withHolder(slices.Clone(o.Reporters[:1]), env)
		r := &resend{word: o.Words[0]}
		var st decide.DeviceState
		if m.look(env, s.what, &st) {
			r.recovering = st.State == decide.Recovering && st.Review != nil
			r.taken = slices.Contains(st.Taken, r.word)
		}
		m.resent = r
		m.mu.Unlock()
		m.signal(env, api.SignalObservation, o)
	}
	return s
}

// checkResent holds a resend of a taken word to the review it found: it fails no review.
func (m *deviceModel) checkResent(env *testsuite.TestWorkflowEnvironment, after string, st *decide.DeviceState) {
	r := m.resent
	m.resent = nil
	if r == nil || !r.recovering || !r.taken || len(st.Transitions) == 0 {
		return
	}
	last := st.Transitions[len(st.Transitions)-1]
	if last.At.Equal(env.Now()) && last.From == decide.Recovering && strings.Contains(last.Reason, "during the recovery review") {
		m.violate("after %s: the word %s, which the device took before, failed its review (%s)", after, r.word, last.Reason)
	}
}

// withHolder adds the Pod that holds the device now (if one does), saying nothing against it, to
// a detector's reporters, and notes that the workflow was told who holds it. Callers hold m.mu.
func (m *deviceModel) withHolder(rs []decide.Reporter, env *testsuite.TestWorkflowEnvironment) []decide.Reporter {
	if m.held {
		m.heldAt = env.Now()
		return append(rs, decide.Reporter{Namespace: "ns", Pod: "p", Container: "c", Claim: "cl", Health: device.Healthy})
	}
	m.idleAt = env.Now()
	return rs
}
