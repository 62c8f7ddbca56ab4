package rolloutplan

import (
	"math"
	"strings"
	"testing"
)

// contention is a report with a 1,000/s, 10 ms baseline and three tenants of a fifth of the device
// each, the last noisy, with the given figures.
func contention(tenant, noisy LoadResult) ProofReport {
	r := ProofReport{Tolerance: 0.1, Baseline: LoadResult{Throughput: 1000, P99Ms: 10}}
	for i, role := range []string{RoleTenant, RoleTenant, RoleNoisy} {
		got := tenant
		if role == RoleNoisy {
			got = noisy
		}
		r.Tenants = append(r.Tenants, TenantFigures{Pod: "load-" + string(rune('0'+i)), ShareID: "s" + string(rune('0'+i)), Role: role, Fraction: 0.2, Expected: 200, Result: got})
	}
	return r
}

func TestJudge(t *testing.T) {
	cases := []struct {
		name          string
		tenant, noisy LoadResult
		enforced      bool
		first         string
	}{
		{"held to shares", LoadResult{Throughput: 199, P99Ms: 10.2}, LoadResult{Throughput: 201, P99Ms: 10}, true, ""},
		{"at the edges", LoadResult{Throughput: 180, P99Ms: 11}, LoadResult{Throughput: 220, P99Ms: 30}, true, ""},
		{"noisy over its ceiling", LoadResult{Throughput: 190, P99Ms: 10}, LoadResult{Throughput: 667, P99Ms: 12}, false,
			"noisy tenant load-2 (ShareID s2) got 667/s, 3.33x its share (200/s, 20% of the device): 234% over"},
		{"noisy just over", LoadResult{Throughput: 190, P99Ms: 10}, LoadResult{Throughput: 221, P99Ms: 10}, false, "noisy tenant load-2"},
		{"tenant starved", LoadResult{Throughput: 179, P99Ms: 10}, LoadResult{Throughput: 200, P99Ms: 10}, false,
			"tenant load-0 (ShareID s0) at its share got 179/s, 90% of its share (200/s)"},
		{"tenant slow", LoadResult{Throughput: 200, P99Ms: 11.1}, LoadResult{Throughput: 200, P99Ms: 10}, false,
			"tenant load-0 (ShareID s0) at its share saw p99 11.1ms, 1.11x the baseline's 10.0ms"},
		{"tenant drops", LoadResult{Throughput: 200, P99Ms: 10, Drops: 1}, LoadResult{Throughput: 200, P99Ms: 10}, false, "tenant load-0 (ShareID s0) dropped 1 and erred 0 times"},
		{"noisy errs", LoadResult{Throughput: 200, P99Ms: 10}, LoadResult{Throughput: 200, P99Ms: 10, Errors: 2}, false, "noisy load-2 (ShareID s2) dropped 0 and erred 2 times"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := contention(c.tenant, c.noisy)
			r.Judge()
			if r.Enforced != c.enforced {
				t.Fatalf("enforced = %v, reasons %v", r.Enforced, r.Reasons)
			}
			if c.first != "" && (len(r.Reasons) == 0 || !strings.HasPrefix(r.Reasons[0], c.first)) {
				t.Errorf("first reason = %q, want %q", r.Reasons, c.first)
			}
			if c.enforced && len(r.Reasons) > 0 {
				t.Errorf("reasons of an enforced proof: %v", r.Reasons)
			}
		})
	}
}

// TestJudgeNoisyExcessComesFirst: when the noisy tenant breaks its ceiling and starves the others,
// the report names the noisy tenant's excess first.
func TestJudgeNoisyExcessComesFirst(t *testing.T) {
	r := contention(LoadResult{Throughput: 167, P99Ms: 12}, LoadResult{Throughput: 667, P99Ms: 12})
	r.Judge()
	if r.Enforced || len(r.Reasons) != 5 || !strings.HasPrefix(r.Reasons[0], "noisy tenant") {
		t.Fatalf("reasons = %v", r.Reasons)
	}
	if !strings.Contains(r.Summary(), "NOT enforced") || !strings.Contains(r.Summary(), "noisy tenant load-2") {
		t.Errorf("summary = %q", r.Summary())
	}
}

func TestJudgeBaseline(t *testing.T) {
	r := contention(LoadResult{Throughput: 200, P99Ms: 10}, LoadResult{Throughput: 200, P99Ms: 10})
	r.Baseline = LoadResult{}
	r.Judge()
	if r.Enforced || !strings.Contains(r.Reasons[0], "baseline measured no throughput") {
		t.Errorf("no baseline: %v", r.Reasons)
	}
	r.Baseline = LoadResult{Throughput: 1000, P99Ms: 10, Errors: 1}
	r.Judge()
	if r.Enforced || !strings.Contains(r.Reasons[0], "baseline alone dropped 0 and erred 1") {
		t.Errorf("baseline errors: %v", r.Reasons)
	}
	r = ProofReport{Baseline: LoadResult{Throughput: 1000}}
	r.Judge()
	if r.Enforced || r.Reasons[0] != "no tenant was measured" {
		t.Errorf("no tenants: %v", r.Reasons)
	}
	r = contention(LoadResult{Throughput: 200, P99Ms: 10}, LoadResult{Throughput: 200, P99Ms: 10})
	r.Judge()
	if !r.Enforced || !strings.HasPrefix(r.Summary(), "enforced on") {
		t.Errorf("summary = %q", r.Summary())
	}
	if !Proven([]ProofReport{r}) || Proven(nil) || Proven([]ProofReport{r, {}}) {
		t.Error("Proven")
	}
}

func TestLoadResultValid(t *testing.T) {
	for _, bad := range []LoadResult{{Throughput: math.NaN()}, {P99Ms: math.Inf(1)}, {Throughput: -1}, {Drops: -1}, {Errors: -2}} {
		if bad.Valid() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (LoadResult{Throughput: 1, P99Ms: 2}).Valid(); err != nil {
		t.Error(err)
	}
}

// TestJudgeEdges: a load that got nothing is a figure, not a broken result; figures with nothing
// to compare with are not judged; a report with no reason and a group with no names still read.
func TestJudgeEdges(t *testing.T) {
	if err := (LoadResult{}).Valid(); err != nil {
		t.Errorf("a zero result: %v", err)
	}
	r := ProofReport{Tolerance: 0.1, Baseline: LoadResult{Throughput: 0, P99Ms: 10},
		Tenants: []TenantFigures{{Pod: "t", Role: RoleTenant, Expected: 200, Result: LoadResult{Throughput: 100, P99Ms: 10}}}}
	r.Judge()
	if len(r.Reasons) != 1 {
		t.Errorf("no baseline: %v", r.Reasons)
	}
	r = ProofReport{Tolerance: 0.1, Baseline: LoadResult{Throughput: 1000, P99Ms: 0},
		Tenants: []TenantFigures{{Pod: "n", Role: RoleNoisy, Expected: 0, Result: LoadResult{Throughput: 5, P99Ms: 5}},
			{Pod: "t", Role: RoleTenant, Expected: 200, Result: LoadResult{Throughput: 200, P99Ms: 5}}}}
	r.Judge()
	if !r.Enforced {
		t.Errorf("nothing to compare: %v", r.Reasons)
	}
	if s := (ProofReport{Node: "n"}).Summary(); !strings.Contains(s, "no reason recorded") || !strings.Contains(s, "driver unknown on unknown") {
		t.Errorf("summary = %q", s)
	}
	if s := (ProofGroup{DriverVersion: "1.0.0", NodeType: "a100"}).String(); s != "driver 1.0.0 on a100" {
		t.Errorf("group = %q", s)
	}
}
