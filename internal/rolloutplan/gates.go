package rolloutplan

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// Failure classes of an allocation failure; each goes to its own alert.
const (
	FailureRetryable    = "retryable"
	FailureNonRetryable = "non-retryable"
	FailureNeedsCleanup = "needs-cleanup"
)

// Report is a phase's gate report: the figures measured over its soak and the gates they failed.
type Report struct {
	Phase string    `json:"phase"`
	Since time.Time `json:"since"`
	At    time.Time `json:"at"`
	// Claims is how many claims of the phase's classes were created during the soak.
	Claims           int             `json:"claims"`
	ClaimToAllocated Stage           `json:"claimToAllocated"`
	AllocatedToReady Stage           `json:"allocatedToReady"`
	Failures         []Failure       `json:"failures,omitempty"`
	Fragmentation    []Fragmentation `json:"fragmentation,omitempty"`
	Drift            []string        `json:"drift,omitempty"`
	CrossNamespace   []string        `json:"crossNamespace,omitempty"`
	// CapacityViolations are the shared-capacity invariant violations on the phase's devices.
	CapacityViolations []string      `json:"capacityViolations,omitempty"`
	Queries            []QueryResult `json:"queries,omitempty"`
	// Failed lists each gate that failed, with the figure and its threshold.
	Failed []string `json:"failed,omitempty"`
	// Waiting lists the query gates that had no data and wait for it (onNoData: wait): the
	// phase is measured again.
	Waiting []string `json:"waiting,omitempty"`
	// NoData lists what each query gate without data did (failed, passed, waiting), so the report
	// says which gates were decided on no data.
	NoData []string `json:"noData,omitempty"`
}

// Passed is true when no gate failed and none waits for data.
func (r Report) Passed() bool { return len(r.Failed) == 0 && len(r.Waiting) == 0 }

// Stage is one latency stage: how many claims went through it, how many are still waiting (their
// wait so far counts in the percentiles), and p50/p99.
type Stage struct {
	Count   int                 `json:"count"`
	Waiting int                 `json:"waiting"`
	P50     policy.JSONDuration `json:"p50"`
	P99     policy.JSONDuration `json:"p99"`
}

// Failure is one allocation failure and its class.
type Failure struct {
	Class  string `json:"class"`
	Object string `json:"object"`
	Reason string `json:"reason"`
}

// Fragmentation is, for one capacity of the phase's shared devices, the free amount no valid
// request can use (free < the smallest request) as a fraction of all that is free.
type Fragmentation struct {
	Capacity   string  `json:"capacity"`
	Free       int64   `json:"free"`
	Fragmented int64   `json:"fragmented"`
	Fraction   float64 `json:"fraction"`
}

// QueryResult is a PromQL gate's value (or why it has none: an unanswered query fails its gate).
// A query that answered without a number to compare has NoData set ("no samples", "NaN", "+Inf",
// "-Inf") and Value 0: NaN and ±Inf are never kept, so a report always encodes as JSON.
type QueryResult struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	NoData string  `json:"noData,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// NoDataOf says whether v is a number a gate can compare, and if not, what it is.
func NoDataOf(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return ""
}

// Evaluate measures phase i of the plan over the snapshot (claims created since the phase was
// enabled) and checks its gates. queries are the PromQL gates' answers, in the plan's order.
func Evaluate(p Plan, i int, since time.Time, s Snapshot, queries []QueryResult) Report {
	ph := p.Phases[i]
	r := Report{Phase: ph.Name, Since: since, At: s.Now, Queries: queries, CapacityViolations: s.CapacityViolations}
	classes := map[string]bool{}
	for _, c := range ph.Classes {
		classes[c.Name] = true
	}
	var toAlloc, toReady []time.Duration
	for _, c := range s.Claims {
		if c.Created.Before(since) || !usesAny(c.Classes, classes) {
			continue
		}
		r.Claims++
		if c.AllocatedAt == nil {
			r.ClaimToAllocated.Waiting++
			toAlloc = append(toAlloc, s.Now.Sub(c.Created))
			continue
		}
		toAlloc = append(toAlloc, c.AllocatedAt.Sub(c.Created))
		if c.ReadyAt == nil {
			r.AllocatedToReady.Waiting++
			toReady = append(toReady, s.Now.Sub(*c.AllocatedAt))
			continue
		}
		toReady = append(toReady, c.ReadyAt.Sub(*c.AllocatedAt))
	}
	r.ClaimToAllocated.fill(toAlloc)
	r.AllocatedToReady.fill(toReady)
	r.Failures = failures(p.AllowedNamespaces(i), s)
	devices := make(map[string]*Device, len(s.Devices))
	for k := range s.Devices {
		d := &s.Devices[k]
		devices[deviceKey(d.Driver, d.Pool, d.Name)] = d
	}
	r.Fragmentation = fragmentation(s, devices)
	r.Drift = drift(p, s)
	r.CrossNamespace = crossNamespace(p.AllowedNamespaces(i), s, devices)
	r.Failed, r.Waiting, r.NoData = ph.Gates.check(r)
	return r
}

func usesAny(have []string, want map[string]bool) bool {
	for _, c := range have {
		if want[c] {
			return true
		}
	}
	return false
}

func (st *Stage) fill(ds []time.Duration) {
	st.Count = len(ds) - st.Waiting
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	st.P50 = policy.JSONDuration(percentile(ds, 50))
	st.P99 = policy.JSONDuration(percentile(ds, 99))
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, pct int) time.Duration {
	rank := (pct*len(sorted) + 99) / 100
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

var (
	nonRetryableRE = regexp.MustCompile(`(?i)(not found|invalid|unsupported|forbidden|cannot be used)`)
	cleanupRE      = regexp.MustCompile(`(?i)(being deleted|deletion|in use by|reserved for another|already allocated)`)
)

// Classify sorts a Pending Pod's scheduling message into a failure class: claims in the way
// (being deleted, held by another consumer) need cleanup; a class, template or parameter that
// cannot work never will; anything else (no capacity yet) is retryable.
func Classify(message string) string {
	switch {
	case cleanupRE.MatchString(message):
		return FailureNeedsCleanup
	case nonRetryableRE.MatchString(message):
		return FailureNonRetryable
	}
	return FailureRetryable
}

func failures(allowed map[string]bool, s Snapshot) []Failure {
	var out []Failure
	for _, p := range s.Pending {
		if !allowed[p.Namespace] {
			continue
		}
		out = append(out, Failure{Class: Classify(p.Message), Object: "pod " + p.Namespace + "/" + p.Name, Reason: p.Reason + ": " + p.Message})
	}
	for _, c := range s.Claims {
		if c.Orphaned && allowed[c.Namespace] {
			out = append(out, Failure{Class: FailureNeedsCleanup, Object: "resourceclaim " + c.Namespace + "/" + c.Name,
				Reason: "allocated but reserved for no Pod, and the Pod it was made for is gone"})
		}
	}
	return out
}

// FailureCounts counts failures by class.
func FailureCounts(fs []Failure) map[string]int {
	out := map[string]int{}
	for _, f := range fs {
		out[f.Class]++
	}
	return out
}

func fragmentation(s Snapshot, devices map[string]*Device) []Fragmentation {
	used := map[string]map[string]int64{}
	for _, c := range s.Claims {
		for _, r := range c.Results {
			k := deviceKey(r.Driver, r.Pool, r.Device)
			if d := devices[k]; d == nil || !d.Shared {
				continue
			}
			if used[k] == nil {
				used[k] = map[string]int64{}
			}
			for name, v := range r.Consumed {
				used[k][name] += v
			}
		}
	}
	totals := map[string]*Fragmentation{}
	for k := range s.Devices {
		d := &s.Devices[k]
		if !d.Shared {
			continue
		}
		u := used[deviceKey(d.Driver, d.Pool, d.Name)]
		for name, c := range d.Capacity {
			free := c.Value - u[name]
			if free <= 0 {
				continue
			}
			t := totals[name]
			if t == nil {
				t = &Fragmentation{Capacity: name}
				totals[name] = t
			}
			t.Free += free
			if free < c.Smallest {
				t.Fragmented += free
			}
		}
	}
	out := make([]Fragmentation, 0, len(totals))
	for _, t := range totals {
		t.Fraction = float64(t.Fragmented) / float64(t.Free)
		out = append(out, *t)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Capacity < out[b].Capacity })
	return out
}

// drift lists the phase's nodes whose slices disagree with the node: a DRA-owned node publishing
// another number of devices than it had under the plugin, a node not labelled for DRA whose
// devices are published anyway, and a node both drivers advertise.
func drift(p Plan, s Snapshot) []string {
	count := map[string]int64{}
	for _, d := range s.Devices {
		count[d.Node]++
	}
	var out []string
	for _, n := range s.Nodes {
		have := count[n.Name]
		switch {
		case n.PluginDevices > 0 && have > 0:
			out = append(out, fmt.Sprintf("%s: the plugin advertises %d and DRA slices publish %d devices", n.Name, n.PluginDevices, have))
		case n.Owner != p.DRA && have > 0:
			out = append(out, fmt.Sprintf("%s: DRA slices publish %d devices but the node is not labelled %s=%s", n.Name, have, p.OwnerLabel, p.DRA))
		case n.Owner == p.DRA && n.Expected >= 0 && have != n.Expected:
			out = append(out, fmt.Sprintf("%s: DRA slices publish %d devices, the node had %d", n.Name, have, n.Expected))
		}
	}
	return out
}

func crossNamespace(allowed map[string]bool, s Snapshot, devices map[string]*Device) []string {
	var out []string
	for _, c := range s.Claims {
		if allowed[c.Namespace] {
			continue
		}
		for _, r := range c.Results {
			if devices[deviceKey(r.Driver, r.Pool, r.Device)] != nil {
				out = append(out, fmt.Sprintf("%s/%s uses %s", c.Namespace, c.Name, deviceKey(r.Driver, r.Pool, r.Device)))
				break
			}
		}
	}
	return out
}

// check lists the gates a report fails, the query gates that wait for data, and what each query
// gate without data did.
func (g Gates) check(r Report) (out, waiting, noData []string) {
	if r.Claims < g.MinClaims {
		out = append(out, fmt.Sprintf("claims: %d created during the soak, the gate needs %d", r.Claims, g.MinClaims))
	}
	out = append(out, g.ClaimToAllocated.check("claim->allocated", r.ClaimToAllocated)...)
	out = append(out, g.AllocatedToReady.check("allocated->ready", r.AllocatedToReady)...)
	if l := g.AllocationFailures; l != nil {
		n := FailureCounts(r.Failures)
		for _, c := range []struct {
			class string
			max   int
		}{{FailureRetryable, l.Retryable}, {FailureNonRetryable, l.NonRetryable}, {FailureNeedsCleanup, l.NeedsCleanup}} {
			if n[c.class] > c.max {
				out = append(out, fmt.Sprintf("allocation failures (%s): %d, the gate allows %d", c.class, n[c.class], c.max))
			}
		}
	}
	if g.MaxFragmentation != nil {
		for _, f := range r.Fragmentation {
			if f.Fraction > *g.MaxFragmentation {
				out = append(out, fmt.Sprintf("fragmentation of %s: %.3f, the gate allows %.3f", f.Capacity, f.Fraction, *g.MaxFragmentation))
			}
		}
	}
	if g.MaxDrift != nil && len(r.Drift) > *g.MaxDrift {
		out = append(out, fmt.Sprintf("slice-vs-node drift: %d nodes, the gate allows %d", len(r.Drift), *g.MaxDrift))
	}
	if g.MaxCrossNamespace != nil && len(r.CrossNamespace) > *g.MaxCrossNamespace {
		out = append(out, fmt.Sprintf("claims outside the phase's tenants: %d, the gate allows %d", len(r.CrossNamespace), *g.MaxCrossNamespace))
	}
	if g.MaxCapacityViolations != nil && len(r.CapacityViolations) > *g.MaxCapacityViolations {
		out = append(out, fmt.Sprintf("capacity invariant violations: %d, the gate allows %d", len(r.CapacityViolations), *g.MaxCapacityViolations))
	}
	for k, q := range g.Queries {
		if k >= len(r.Queries) || r.Queries[k].Error != "" {
			why := "no answer"
			if k < len(r.Queries) {
				why = r.Queries[k].Error
			}
			out = append(out, fmt.Sprintf("query %s: %s", q.Name, why))
			continue
		}
		v := r.Queries[k].Value
		if why := cmp.Or(r.Queries[k].NoData, NoDataOf(v)); why != "" {
			line := fmt.Sprintf("query %s: no data (%s), onNoData: %s", q.Name, why, q.NoDataAction())
			switch q.NoDataAction() {
			case NoDataPass:
				noData = append(noData, line+": passed")
			case NoDataWait:
				noData = append(noData, line+": waiting")
				waiting = append(waiting, line)
			default:
				noData = append(noData, line+": failed")
				out = append(out, line)
			}
			continue
		}
		if q.Max != nil && v > *q.Max {
			out = append(out, fmt.Sprintf("query %s: %g, the gate allows at most %g", q.Name, v, *q.Max))
		}
		if q.Min != nil && v < *q.Min {
			out = append(out, fmt.Sprintf("query %s: %g, the gate needs at least %g", q.Name, v, *q.Min))
		}
	}
	return out, waiting, noData
}

func (l *Latency) check(name string, st Stage) []string {
	if l == nil {
		return nil
	}
	var out []string
	if l.P50 > 0 && st.P50 > l.P50 {
		out = append(out, fmt.Sprintf("%s p50: %s, the gate allows %s", name, st.P50, l.P50))
	}
	if l.P99 > 0 && st.P99 > l.P99 {
		out = append(out, fmt.Sprintf("%s p99: %s, the gate allows %s", name, st.P99, l.P99))
	}
	return out
}

// Violation is a node that blocks a phase at preflight.
type Violation struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Preflight checks that no node of the phase is owned twice: advertising the plugin's extended
// resource while DRA slices publish devices of the phase's drivers on it. A selector that matches
// no node blocks too (a typo must not pass as an empty phase).
func Preflight(p Plan, i int, s Snapshot) []Violation {
	if len(s.Nodes) == 0 {
		return []Violation{{Reason: fmt.Sprintf("the selector %q matches no node", p.Phases[i].Nodes)}}
	}
	count := map[string]int{}
	for _, d := range s.Devices {
		count[d.Node]++
	}
	var out []Violation
	for _, n := range s.Nodes {
		if n.PluginDevices > 0 && count[n.Name] > 0 {
			out = append(out, Violation{Node: n.Name, Reason: fmt.Sprintf("double ownership: the device plugin advertises %d %s and DRA slices publish %d devices", n.PluginDevices, p.PluginResource, count[n.Name])})
		}
	}
	return out
}
