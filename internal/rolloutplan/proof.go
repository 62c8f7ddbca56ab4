package rolloutplan

import (
	"fmt"
	"math"
	"time"
)

// LoadResult is what a load Pod writes, as JSON, to its termination message.
type LoadResult struct {
	// Throughput is the work the load got done per second (its own unit, the same in every run).
	Throughput float64 `json:"throughput"`
	// P99Ms is the 99th-percentile latency of its operations, in milliseconds.
	P99Ms  float64 `json:"p99Ms"`
	Drops  int64   `json:"drops"`
	Errors int64   `json:"errors"`
}

// Valid says the result is a measurement: finite, non-negative figures.
func (r LoadResult) Valid() error {
	for _, v := range []float64{r.Throughput, r.P99Ms} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("throughput %v, p99Ms %v: want finite figures, not negative", r.Throughput, r.P99Ms)
		}
	}
	if r.Drops < 0 || r.Errors < 0 {
		return fmt.Errorf("drops %d, errors %d: want counts, not negative", r.Drops, r.Errors)
	}
	return nil
}

// Load roles.
const (
	RoleBaseline = "baseline"
	RoleTenant   = "tenant"
	RoleNoisy    = "noisy"
)

// TenantFigures is one load Pod of the contention stage.
type TenantFigures struct {
	Pod     string `json:"pod"`
	ShareID string `json:"shareID,omitempty"`
	Role    string `json:"role"`
	// Fraction is the tenant's share of the device's capacity (its claim's request over the
	// capacity); Expected is that fraction of the baseline's throughput.
	Fraction float64    `json:"fraction"`
	Expected float64    `json:"expected"`
	Result   LoadResult `json:"result"`
}

// ProofGroup is one driver version and node type of a phase.
type ProofGroup struct {
	DriverVersion string `json:"driverVersion"`
	NodeType      string `json:"nodeType"`
}

func (g ProofGroup) String() string {
	v, t := g.DriverVersion, g.NodeType
	if v == "" {
		v = "unknown"
	}
	if t == "" {
		t = "unknown"
	}
	return "driver " + v + " on " + t
}

// ProofReport is one enforcement proof: its inputs, the figures of each load and the verdict.
type ProofReport struct {
	Phase    string     `json:"phase"`
	Class    string     `json:"class"`
	Group    ProofGroup `json:"group"`
	Node     string     `json:"node"`
	Device   string     `json:"device"`
	Capacity string     `json:"capacity"`
	// CapacityValue is the device's capacity; Share each tenant's request.
	CapacityValue string          `json:"capacityValue"`
	Share         string          `json:"share"`
	Noisy         float64         `json:"noisy"`
	Tolerance     float64         `json:"tolerance"`
	Duration      time.Duration   `json:"duration"`
	Baseline      LoadResult      `json:"baseline"`
	Tenants       []TenantFigures `json:"tenants"`
	Enforced      bool            `json:"enforced"`
	// Reasons say why it is not enforced, the noisy tenant's excess first.
	Reasons []string  `json:"reasons,omitempty"`
	At      time.Time `json:"at"`
}

// Summary is the verdict in one line.
func (r ProofReport) Summary() string {
	if r.Enforced {
		return fmt.Sprintf("enforced on %s (%s, %s/%s): %d tenants of %s %s each held to their shares; baseline %.0f/s p99 %.1fms",
			r.Node, r.Group, r.Class, r.Device, len(r.Tenants), r.Share, r.Capacity, r.Baseline.Throughput, r.Baseline.P99Ms)
	}
	first := "no reason recorded"
	if len(r.Reasons) > 0 {
		first = r.Reasons[0]
	}
	return fmt.Sprintf("NOT enforced on %s (%s, %s/%s): %s", r.Node, r.Group, r.Class, r.Device, first)
}

// Judge gives the report its verdict. Enforced when the baseline ran clean, every tenant at its
// share kept its throughput at or above its share of the baseline less the tolerance and its p99
// at or under the baseline's plus the tolerance, the noisy tenant got no more than its share plus
// the tolerance (the ceiling), and no load dropped work or erred.
func (r *ProofReport) Judge() {
	r.Reasons = nil
	bad := func(format string, args ...any) { r.Reasons = append(r.Reasons, fmt.Sprintf(format, args...)) }
	b := r.Baseline
	if b.Throughput <= 0 {
		bad("the baseline measured no throughput: nothing to compare with")
	}
	if b.Drops > 0 || b.Errors > 0 {
		bad("the baseline alone dropped %d and erred %d times", b.Drops, b.Errors)
	}
	var noisy []string
	var others []string
	for _, t := range r.Tenants {
		got := t.Result
		name := t.Pod
		if t.ShareID != "" {
			name += " (ShareID " + t.ShareID + ")"
		}
		if got.Drops > 0 || got.Errors > 0 {
			others = append(others, fmt.Sprintf("%s %s dropped %d and erred %d times", t.Role, name, got.Drops, got.Errors))
		}
		if b.Throughput <= 0 || t.Expected <= 0 {
			continue
		}
		ratio := got.Throughput / t.Expected
		switch t.Role {
		case RoleNoisy:
			if ratio > 1+r.Tolerance {
				noisy = append(noisy, fmt.Sprintf("noisy tenant %s got %.0f/s, %.2fx its share (%.0f/s, %.0f%% of the device): %.0f%% over, the driver does not hold it to its share",
					name, got.Throughput, ratio, t.Expected, 100*t.Fraction, 100*(ratio-1)))
			}
		default:
			if ratio < 1-r.Tolerance {
				others = append(others, fmt.Sprintf("tenant %s at its share got %.0f/s, %.0f%% of its share (%.0f/s)", name, got.Throughput, 100*ratio, t.Expected))
			}
			if b.P99Ms > 0 && got.P99Ms > b.P99Ms*(1+r.Tolerance) {
				others = append(others, fmt.Sprintf("tenant %s at its share saw p99 %.1fms, %.2fx the baseline's %.1fms", name, got.P99Ms, got.P99Ms/b.P99Ms, b.P99Ms))
			}
		}
	}
	r.Reasons = append(append(r.Reasons, noisy...), others...)
	r.Enforced = len(r.Reasons) == 0 && len(r.Tenants) > 0
	if len(r.Tenants) == 0 {
		r.Reasons = append(r.Reasons, "no tenant was measured")
	}
}

// Proven says every report of a proof is enforced (and there is one).
func Proven(reports []ProofReport) bool {
	for _, r := range reports {
		if !r.Enforced {
			return false
		}
	}
	return len(reports) > 0
}
