package decide

import (
	"fmt"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Proof from the source (Rules.SourceProof). A passed probe, canary and stability window are the
// device's own evidence; the sources that reported its fault must agree before it goes back: no
// report that still says Unhealthy, no detector's fault that still stands (a recovery action
// other than none, a failing health watch). A review whose window ended while one does waits for
// it, up to the policy's sourceWait, and then fails: the ladder takes its next try. A new fault
// reported meanwhile fails the review at once, as in every stage.

// sourcesSay says what the device's sources still report against it ("" when nothing).
func (g reviewing) sourcesSay() string {
	st := g.st
	var said []string
	if st.Health == device.Unhealthy {
		s := "reported Unhealthy"
		if st.Message != "" {
			s += " (" + st.Message + ")"
		}
		said = append(said, s)
	}
	if len(st.Standing) > 0 {
		said = append(said, "standing "+strings.Join(st.Standing, ", "))
	}
	return strings.Join(said, "; ")
}

// awaitSources holds a review whose window ended, or whose release a person approved, while its
// sources still report the fault: waiting says so, and acts are what to do when the policy gives
// them no time.
func (g reviewing) awaitSources(now time.Time) (acts []Action, waiting bool) {
	st := g.st
	r := st.Review
	if !st.rules.SourceProof {
		return nil, false
	}
	still := g.sourcesSay()
	if still == "" {
		return nil, false
	}
	r.Stage, r.Until = StageSources, now.Add(st.Policy.SourceWait.D())
	if !r.Until.After(now) {
		return g.sourcesFailed(now), true
	}
	st.transition(Recovering, fmt.Sprintf("checks passed; waiting up to %s for its sources to say Healthy: %s", st.Policy.SourceWait.D(), still), Actor, now)
	return nil, true
}

// sourcesCleared goes on with a review that waited for its sources, once they say nothing
// against the device; done is false when the usual handling applies.
func (g reviewing) sourcesCleared(now time.Time) ([]Action, bool) {
	st := g.st
	r := st.Review
	if !st.rules.SourceProof || st.State != Recovering || r == nil || r.Stage != StageSources || g.sourcesSay() != "" {
		return nil, false
	}
	st.transition(Recovering, "its sources say Healthy again", Actor, now)
	if r.ApprovedBy != "" {
		// A person approved the release while a source spoke: it goes ahead now.
		r.Stage = StageRelease
		return []Action{{Kind: ActRelease, Reason: g.reviewSummary(), Actor: r.ApprovedBy}}, true
	}
	r.Stage = StageStability
	return g.stabilityDone(now), true
}

// sourcesFailed ends a review whose sources kept reporting the fault: the next try.
func (g reviewing) sourcesFailed(now time.Time) []Action {
	st := g.st
	reason := fmt.Sprintf("its sources still report the fault after its checks passed (waited %s): %s", st.Policy.SourceWait.D(), g.sourcesSay())
	acts := g.reviewFailed(reason, true, Actor, now)
	if st.rules.SourceVerdict {
		repairOf(st).toNodeStep(g.sourcesVerdict(), now)
	}
	return append(acts, repairOf(st).stillBroken(now)...)
}

// sourcesVerdict is the first step the sources that still speak ask for, by the policy's causes:
// a standing word ("dcgm: recovery-action:2") read as its code, and an Unhealthy report's cause.
func (g reviewing) sourcesVerdict() policy.First {
	st := g.st
	var causes []cause.Cause
	for _, w := range st.Standing {
		_, code, _ := strings.Cut(w, ": ")
		causes = append(causes, cause.OfCode(code))
	}
	if st.Health == device.Unhealthy && st.Cause != nil {
		causes = append(causes, *st.Cause)
	}
	first := policy.FirstLadder
	for _, c := range causes {
		if f := cause.ChooseFrom(c, st.Policy.Causes, catalogue(st)).First; f == policy.FirstNode {
			first = f
		}
	}
	return first
}
