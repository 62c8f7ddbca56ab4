package decide

import (
	"slices"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// detectorSays is a node condition's one-time word about the idle device: Unhealthy, from the
// detector alone, carrying the word's hash.
func detectorSays(version int, at time.Time, word string) Observation {
	o := obs(device.Unhealthy, version, devicemsg.SourceHealthReport)
	o.ObservedAt, o.Words = at, []string{word}
	o.Reporters = []Reporter{{Report: "condition:node-1/XidCriticalError/" + dev.String(), Detector: "npd", Health: device.Unhealthy}}
	return o
}

// A new leader re-sends a node condition's word its predecessor delivered (the transition turned
// True less than 10 minutes before it started): the device took that word already, so the review
// in progress goes on. A word it never took fails the review, as before; and without the rule the
// old word failed it too, and the ladder took its next try.
func TestAWordSentAgainByANewLeaderFailsNoReview(t *testing.T) {
	run := func(r Rules, word string) *DeviceState {
		st := inWindowAfterAReset(t, r)
		takeWords(st, []string{"w-delivered"}) // taken with the fault, before the reset
		st.Observe(detectorSays(9, t0.Add(5*time.Minute), word), t0.Add(5*time.Minute))
		return st
	}
	r := proofRules
	r.TakenWords = true
	if st := run(r, "w-delivered"); st.State != Recovering || st.Review == nil {
		t.Fatalf("a word taken before failed the review: state %s; transitions %+v", st.State, st.Transitions)
	}
	if st := run(r, "w-new"); st.State == Recovering || !slices.Contains(st.Taken, "w-new") {
		t.Fatalf("a new word left the review going: state %s, taken %v", st.State, st.Taken)
	}
	if st := run(proofRules, "w-delivered"); st.State == Recovering {
		t.Fatalf("before the rule the word sent again failed the review; now state %s", st.State)
	}
}

// A Pod that says Unhealthy beside a taken word is a fault whatever the word.
func TestAPodBesideATakenWordIsAFault(t *testing.T) {
	r := proofRules
	r.TakenWords = true
	st := inWindowAfterAReset(t, r)
	takeWords(st, []string{"w-delivered"})
	o := detectorSays(9, t0.Add(5*time.Minute), "w-delivered")
	o.Reporters = append(o.Reporters, Reporter{Namespace: "ns", Pod: "p", Health: device.Unhealthy})
	st.Observe(o, t0.Add(5*time.Minute))
	if st.State == Recovering {
		t.Fatal("a Pod's Unhealthy beside a taken word left the review going")
	}
}

// The state keeps the newest maxTaken words, once each.
func TestTakenWordsAreBounded(t *testing.T) {
	st := NewState(dev, "node-1", ladderPolicy(), false)
	st.Follow(Rules{TakenWords: true})
	for i := range maxTaken + 5 {
		takeWords(st, []string{string(rune('a' + i))})
		takeWords(st, []string{string(rune('a' + i))}) // once each
	}
	if len(st.Taken) != maxTaken || st.Taken[maxTaken-1] != string(rune('a'+maxTaken+4)) {
		t.Fatalf("taken %v", st.Taken)
	}
}
