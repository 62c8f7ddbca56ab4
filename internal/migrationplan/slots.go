package migrationplan

import (
	"slices"
	"strings"
	"time"
)

// SlotRequest asks the migration limiter for a slot: at most PerNode migrations at once on a node
// and ClusterWide in the whole cluster (the asking migration's policy).
type SlotRequest struct {
	ID          string    `json:"id"`
	Node        string    `json:"node"`
	PerNode     int       `json:"perNode"`
	ClusterWide int       `json:"clusterWide"`
	At          time.Time `json:"at,omitzero"`
}

// SlotState is the migration limiter's state: who holds a slot and who waits, in arrival order.
type SlotState struct {
	Holders []SlotRequest `json:"holders,omitempty"`
	Queue   []SlotRequest `json:"queue,omitempty"`
	// Granted counts slots ever granted; MaxOnNode is the most migrations ever held at once on one node.
	Granted   int `json:"granted"`
	MaxOnNode int `json:"maxOnNode"`
}

// Acquire queues a request and returns the IDs granted a slot now. A migration that already holds
// a slot or waits for one (a retried request) is granted again or keeps its place.
func (s *SlotState) Acquire(req SlotRequest) []string {
	for i, h := range s.Holders {
		if h.ID == req.ID {
			// A new run of the migration (or a retry) holds the slot from now: a release that
			// names the earlier acquire (ReleaseOf) no longer frees it.
			s.Holders[i].At = req.At
			return []string{req.ID}
		}
	}
	for i, q := range s.Queue {
		if q.ID == req.ID {
			s.Queue[i] = req
			return s.grant()
		}
	}
	s.Queue = append(s.Queue, req)
	return s.grant()
}

// ReleaseOf names a release of the slot migration id acquired at at: the limiter frees it only
// if no acquire came since (a new run of the same migration), as a sweep of runs that ended needs.
func ReleaseOf(id string, at time.Time) string {
	return id + releaseAt + at.UTC().Format(time.RFC3339Nano)
}

const releaseAt = "#acquired="

// Release frees a migration's slot (or drops it from the queue) and returns the IDs granted now.
// A release named by ReleaseOf frees the slot only if it is still held from that acquire.
func (s *SlotState) Release(id string) []string {
	if plain, stamp, ok := strings.Cut(id, releaseAt); ok {
		at, err := time.Parse(time.RFC3339Nano, stamp)
		i := slices.IndexFunc(s.Holders, func(h SlotRequest) bool { return h.ID == plain })
		if err != nil || i < 0 || !s.Holders[i].At.Equal(at) {
			return nil // acquired again since, or not held: nothing to free
		}
		id = plain
	}
	for i, h := range s.Holders {
		if h.ID == id {
			s.Holders = append(s.Holders[:i], s.Holders[i+1:]...)
			break
		}
	}
	for i, q := range s.Queue {
		if q.ID == id {
			s.Queue = append(s.Queue[:i], s.Queue[i+1:]...)
			break
		}
	}
	return s.grant()
}

// grant moves waiting requests that fit under both caps to the holders, in arrival order; a
// request blocked by its node's cap does not hold back another node's.
func (s *SlotState) grant() []string {
	var granted []string
	kept := s.Queue[:0]
	for _, q := range s.Queue {
		if len(s.Holders) < max(1, q.ClusterWide) && s.onNode(q.Node) < max(1, q.PerNode) {
			s.Holders = append(s.Holders, q)
			s.Granted++
			s.MaxOnNode = max(s.MaxOnNode, s.onNode(q.Node))
			granted = append(granted, q.ID)
			continue
		}
		kept = append(kept, q)
	}
	s.Queue = kept
	return granted
}

func (s *SlotState) onNode(node string) int {
	n := 0
	for _, h := range s.Holders {
		if h.Node == node {
			n++
		}
	}
	return n
}

// Position says where a migration waits: 0 when it holds a slot or is unknown.
func (s *SlotState) Position(id string) int {
	for i, q := range s.Queue {
		if q.ID == id {
			return i + 1
		}
	}
	return 0
}

// Idle is true when nobody holds or waits for a slot.
func (s *SlotState) Idle() bool { return len(s.Holders) == 0 && len(s.Queue) == 0 }
