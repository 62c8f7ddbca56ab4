package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

// notBilledHere are the action types a storm's count leaves out: the queries the bench itself makes
// to follow the storm, and the per-marker count of local activities, which the server also counts
// once per workflow task as command_BatchMarkers (the one Temporal Cloud bills).
var notBilledHere = map[string]bool{"grpc_QueryWorkflow": true, "command_RecordMarker": true}

// readActions reads the stack's Temporal server's action counter (nil when it has none).
func readActions(ctx context.Context, st *stack) (map[string]float64, error) {
	if st.actions == nil {
		return nil, nil
	}
	return st.actions(ctx)
}

// printActions prints what the storm cost in Temporal actions, in total, per device and by type.
func printActions(out io.Writer, what any, before, after map[string]float64, devices int) {
	type kind struct {
		name string
		n    float64
	}
	var kinds []kind
	total := 0.0
	for name, d := range billed(before, after) {
		kinds = append(kinds, kind{name, d})
		total += d
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].n > kinds[j].n })
	var fields []string
	for _, k := range kinds {
		fields = append(fields, fmt.Sprintf("%s %.0f", strings.TrimPrefix(k.name, "grpc_"), k.n))
	}
	fmt.Fprintf(out, "%s storm: Temporal actions (the server's action counter, the bench's queries left out) %.0f, %.1f per device: %s\n",
		what, total, total/float64(devices), strings.Join(fields, ", "))
}

// billed is what each action type counted between two reads of the counter, the types this bench
// leaves out left out.
func billed(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 && !notBilledHere[name] {
			out[name] = d
		}
	}
	return out
}

// holds says what runs in the bench process: the embedded Temporal server too, unless the stack's
// Temporal runs in processes of its own.
func (st *stack) holds() string {
	if st.temporalPids != nil {
		return "worker + watcher"
	}
	return "embedded Temporal + worker + watcher"
}
