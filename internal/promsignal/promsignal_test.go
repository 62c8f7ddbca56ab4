package promsignal

import (
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/policy"
)

var (
	xid   = policy.PromSignal{Name: "xid", Query: "DCGM_FI_DEV_XID_ERRORS", Kind: policy.PromLast}
	count = policy.PromSignal{Name: "xid-count", Query: "DCGM_EXP_XID_ERRORS_COUNT", Kind: policy.PromCount, CodeLabel: "xid"}
	level = policy.PromSignal{Name: "row-remap-failure", Query: "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", Kind: policy.PromLevel}
)

func gpu(uuid string, v float64, extra ...string) Sample {
	l := map[string]string{"__name__": "DCGM_FI_DEV_XID_ERRORS", LabelUUID: uuid, LabelHostname: "node-1", LabelIndex: "0"}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return Sample{Labels: l, Value: v}
}

func codes(fs []Fault) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Labels[LabelUUID]+"="+f.Code)
	}
	return strings.Join(out, " ")
}

func TestParse(t *testing.T) {
	got, err := Parse([]byte(`{"status":"success","data":{"resultType":"vector","result":[
		{"metric":{"__name__":"DCGM_FI_DEV_XID_ERRORS","UUID":"GPU-a"},"value":[1767225600.5,"79"]},
		{"metric":{"UUID":"GPU-b"},"value":[1767225600.5,"NaN"]}]}}`))
	if err != nil || len(got) != 2 || got[0].Value != 79 || got[0].Labels[LabelUUID] != "GPU-a" || !math.IsNaN(got[1].Value) {
		t.Fatalf("%+v %v", got, err)
	}
	for body, want := range map[string]string{
		`<html>502 Bad Gateway</html>`:                                                                 "not Prometheus' JSON",
		`{"status":"error","errorType":"bad_data","error":"parse error at char 5"}`:                    "bad_data: parse error",
		`{"status":"success","data":{"resultType":"matrix","result":[]}}`:                              "not an instant vector",
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,7]}]}}`:   "not a string",
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}`: `value "x"`,
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,""]}]}}`:  `value "": strconv.ParseFloat`,
	} {
		if _, err := Parse([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// An answer that says it may miss series is partial: VictoriaMetrics' isPartial, Thanos' warnings.
func TestParseTellsAPartialAnswer(t *testing.T) {
	for body, partial := range map[string]bool{
		`{"status":"success","data":{"resultType":"vector","result":[]}}`:                                               false,
		`{"status":"success","isPartial":true,"data":{"resultType":"vector","result":[]}}`:                              true,
		`{"status":"success","warnings":["store 10.0.0.7:10901 timed out"],"data":{"resultType":"vector","result":[]}}`: true,
	} {
		a, err := ParseAnswer([]byte(body))
		if err != nil || a.Partial != partial {
			t.Errorf("%s: partial %v (%v), want %v", body, a.Partial, err, partial)
		}
	}
}

func TestNaming(t *testing.T) {
	n := Naming{UUIDAttribute: "uuid", IndexAttribute: "index"}
	dra, ok := n.Device(map[string]string{LabelDRADriver: "gpu.example.com", LabelDRAPool: "node-1", LabelDRADevice: "gpu-3", LabelUUID: "GPU-a", LabelHostname: "node-1"})
	if !ok || dra.Device == nil || dra.Device.Name != "gpu-3" || dra.Attribute != nil {
		t.Fatalf("DRA labels: %+v", dra)
	}
	byUUID, ok := n.Device(map[string]string{LabelUUID: "GPU-a", LabelHostname: "node-1", LabelIndex: "3"})
	if !ok || byUUID.Node != "node-1" || byUUID.Attribute == nil || byUUID.Attribute.Name != "uuid" || byUUID.Attribute.Value != "GPU-a" {
		t.Fatalf("UUID: %+v", byUUID)
	}
	byIndex, ok := n.Device(map[string]string{LabelHostname: "node-1", LabelIndex: "3"})
	if !ok || byIndex.Attribute == nil || byIndex.Attribute.Name != "index" || byIndex.Attribute.Value != "3" {
		t.Fatalf("index: %+v", byIndex)
	}
	for _, l := range []map[string]string{
		{LabelUUID: "GPU-a"},                     // no node
		{LabelHostname: "node-1"},                // no GPU
		{LabelDRADriver: "d", LabelDRAPool: "p"}, // half the DRA name
	} {
		if s, ok := n.Device(l); ok {
			t.Errorf("%v named %+v", l, s)
		}
	}
}

// The XID gauge: its first answer is the baseline; a new non-zero value is a fault once; the
// same value again (a new user of the GPU, a restarted exporter, another err_code label) is not.
func TestTheXIDGaugeFiresOnANewValue(t *testing.T) {
	tr := NewTracker()
	if f, _ := tr.Observe(xid, []Sample{gpu("GPU-a", 31), gpu("GPU-b", 0)}); len(f) != 0 {
		t.Fatalf("the baseline fired: %s", codes(f))
	}
	f, _ := tr.Observe(xid, []Sample{gpu("GPU-a", 31, "pod", "other", "instance", "10.0.0.9:9400"), gpu("GPU-b", 79, "err_code", "79")})
	if codes(f) != "GPU-b=xid:79" {
		t.Fatalf("faults %q", codes(f))
	}
	if f, _ := tr.Observe(xid, []Sample{gpu("GPU-a", 31), gpu("GPU-b", 79, "err_msg", "fallen off the bus")}); len(f) != 0 {
		t.Fatalf("an unchanged value fired again: %s", codes(f))
	}
	if f, _ := tr.Observe(xid, []Sample{gpu("GPU-b", 79)}); len(f) != 0 { // GPU-a's series gone a while
		t.Fatalf("fired: %s", codes(f))
	}
	// GPU-d first shows after the first answer (its exporter was restarting, or its node joined):
	// its XID stood before DeviceWarden read it, a baseline like the first answer's.
	if f, _ := tr.Observe(xid, []Sample{gpu("GPU-a", 31), gpu("GPU-b", 48), gpu("GPU-c", 0), gpu("GPU-d", 94)}); codes(f) != "GPU-b=xid:48" {
		t.Fatalf("faults %q", codes(f))
	}
	if f, _ := tr.Observe(xid, []Sample{gpu("GPU-a", 31), gpu("GPU-b", 48), gpu("GPU-c", 0), gpu("GPU-d", 79)}); codes(f) != "GPU-d=xid:79" {
		t.Fatalf("faults %q", codes(f))
	}
	if n := tr.Series(); n != 4 {
		t.Fatalf("%d series remembered", n)
	}
}

func TestACountFiresOnAnIncreaseAndALevelWhileItStands(t *testing.T) {
	tr := NewTracker()
	c := func(uuid, code string, v float64) Sample { return gpu(uuid, v, "xid", code) }
	tr.Observe(count, []Sample{c("GPU-a", "13", 2)})
	f, _ := tr.Observe(count, []Sample{c("GPU-a", "13", 3), c("GPU-a", "79", 1), c("GPU-b", "13", 0)})
	if codes(f) != "GPU-a=xid-count:13 GPU-a=xid-count:79" {
		t.Fatalf("faults %q", codes(f))
	}
	if f, _ := tr.Observe(count, []Sample{c("GPU-a", "13", 0), c("GPU-a", "79", 1)}); len(f) != 0 { // an exporter restart
		t.Fatalf("a reset counter fired: %s", codes(f))
	}
	tr = NewTracker()
	if f, _ := tr.Observe(level, []Sample{gpu("GPU-a", 1)}); codes(f) != "GPU-a=row-remap-failure" {
		t.Fatalf("a standing level at the first answer: %q", codes(f))
	}
	if f, _ := tr.Observe(level, []Sample{gpu("GPU-a", 1)}); len(f) != 0 {
		t.Fatalf("fired twice: %s", codes(f))
	}
	tr.Observe(level, nil)
	if f, _ := tr.Observe(level, []Sample{gpu("GPU-a", 1)}); len(f) != 1 {
		t.Fatalf("a level that came back did not fire")
	}
}

func TestNaNIsRefusedAndTwoSeriesOfOneGPUAreOne(t *testing.T) {
	tr := NewTracker()
	tr.Observe(xid, []Sample{gpu("GPU-a", 0)})
	f, refused := tr.Observe(xid, []Sample{gpu("GPU-a", math.NaN()), gpu("GPU-b", math.Inf(1))})
	if len(f) != 0 || refused != 2 {
		t.Fatalf("faults %q refused %d", codes(f), refused)
	}
	// Two XIDs in the GPU's lookback, both new: each is a fault.
	f, _ = tr.Observe(xid, []Sample{gpu("GPU-a", 79, "err_code", "79"), gpu("GPU-a", 48, "err_code", "48")})
	if codes(f) != "GPU-a=xid:48 GPU-a=xid:79" {
		t.Fatalf("faults %q", codes(f))
	}
	f, _ = tr.Observe(xid, []Sample{gpu("GPU-a", 94, "pod", "old"), gpu("GPU-a", 94, "pod", "new")})
	if codes(f) != "GPU-a=xid:94" {
		t.Fatalf("one new XID in two series of the GPU: faults %q", codes(f))
	}
}

// An old XID's series lingers in the lookback beside a new one: the new XID fires once, the old
// never again, whichever series the answer lists first.
func TestAnXIDThatStoodDoesNotFireBesideANewOne(t *testing.T) {
	for _, newFirst := range []bool{false, true} {
		tr := NewTracker()
		old, fresh := gpu("GPU-a", 79, "err_code", "79"), gpu("GPU-a", 48, "err_code", "48")
		tr.Observe(xid, []Sample{old})
		answer := []Sample{old, fresh}
		if newFirst {
			answer = []Sample{fresh, old}
		}
		if f, _ := tr.Observe(xid, answer); codes(f) != "GPU-a=xid:48" {
			t.Fatalf("new first %v: faults %q, want the new XID alone", newFirst, codes(f))
		}
		for poll := range 3 {
			slices.Reverse(answer)
			if f, _ := tr.Observe(xid, answer); len(f) != 0 {
				t.Fatalf("new first %v, poll %d: fired again %q", newFirst, poll, codes(f))
			}
		}
		if f, _ := tr.Observe(xid, []Sample{fresh}); len(f) != 0 { // the old one leaves the lookback
			t.Fatalf("fired as the old series left: %q", codes(f))
		}
	}
}

// A partial answer (one that says it may miss series) withdraws no level: the level missing from
// it still stands, and goes only when a complete answer lacks it.
func TestAPartialAnswerWithdrawsNoLevel(t *testing.T) {
	tr := NewTracker()
	a, b := gpu("GPU-a", 1), gpu("GPU-b", 1)
	tr.Observe(level, []Sample{a, b})
	if f, _ := tr.ObservePartial(level, []Sample{a}); len(f) != 0 || !tr.Stands("row-remap-failure", identity(b.Labels, "")) {
		t.Fatalf("a partial answer: faults %q, GPU-b's level stands %v", codes(f), tr.Stands("row-remap-failure", identity(b.Labels, "")))
	}
	if f, _ := tr.ObservePartial(level, []Sample{a, b}); len(f) != 0 {
		t.Fatalf("GPU-b's level fired again after a partial answer: %q", codes(f))
	}
	tr.Observe(level, []Sample{a})
	if tr.Stands("row-remap-failure", identity(b.Labels, "")) {
		t.Fatal("a complete answer without GPU-b's level left it standing")
	}
}

// Whatever the sequence of values, the XID gauge fires exactly when a GPU an earlier answer showed
// shows a non-zero value other than its last.
func TestTheGaugeFiresExactlyOnChange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := NewTracker()
		last := map[string]float64{}
		for step := range rapid.IntRange(1, 30).Draw(t, "steps") {
			var answer []Sample
			want := map[string]bool{}
			for _, u := range []string{"GPU-a", "GPU-b"} {
				if rapid.Bool().Draw(t, "absent") {
					continue
				}
				v := float64(rapid.SampledFrom([]int{0, 31, 48, 79}).Draw(t, "xid"))
				prev, had := last[u]
				want[u] = had && v != 0 && v != prev
				last[u] = v
				answer = append(answer, gpu(u, v))
			}
			f, _ := tr.Observe(xid, answer)
			got := map[string]bool{}
			for _, x := range f {
				got[x.Labels[LabelUUID]] = true
			}
			for _, u := range []string{"GPU-a", "GPU-b"} {
				if got[u] != want[u] {
					t.Fatalf("step %d: %s fired %t, want %t", step, u, got[u], want[u])
				}
			}
		}
	})
}

// The source asks the policy's query aggregated by the labels that name a GPU and its code.
func TestQueryKeepsOnlyTheGPUsLabels(t *testing.T) {
	got := Query("DCGM_EXP_XID_ERRORS_COUNT > 0", "xid")
	if got != "max by (dra_driver_name, dra_pool_name, dra_device_name, UUID, Hostname, gpu, GPU_I_ID, err_code, err_msg, xid) (DCGM_EXP_XID_ERRORS_COUNT > 0)" {
		t.Fatalf("query %s", got)
	}
}

// A counter series new for a GPU the tracker knows is news (a new XID code's counter); a GPU first
// shown later is a baseline. A GPU missing from ForgetAfter complete answers is forgotten (a
// partial answer ages nothing), and back after that is a baseline again; back sooner, its changed
// value fires.
func TestAGPUGoneLongIsForgottenAndAGPUFirstSeenIsABaseline(t *testing.T) {
	tr := NewTracker()
	c := func(uuid, code string, v float64) Sample { return gpu(uuid, v, "xid", code) }
	tr.Observe(count, []Sample{c("GPU-a", "13", 1)})
	f, _ := tr.Observe(count, []Sample{c("GPU-a", "13", 1), c("GPU-a", "79", 1), c("GPU-b", "48", 2)})
	if codes(f) != "GPU-a=xid-count:79" {
		t.Fatalf("faults %q", codes(f))
	}
	for range ForgetAfter - 1 {
		tr.Observe(count, []Sample{c("GPU-a", "13", 1), c("GPU-a", "79", 1)})
		tr.ObservePartial(count, nil)
	}
	if f, _ := tr.Observe(count, []Sample{c("GPU-b", "48", 3)}); codes(f) != "GPU-b=xid-count:48" || tr.GPUs() != 2 {
		t.Fatalf("back within the window: faults %q, %d GPUs", codes(f), tr.GPUs())
	}
	for range ForgetAfter {
		tr.Observe(count, []Sample{c("GPU-a", "13", 1), c("GPU-a", "79", 1)})
	}
	if tr.GPUs() != 1 || tr.Series() != 2 {
		t.Fatalf("after GPU-b left: %d GPUs, %d series", tr.GPUs(), tr.Series())
	}
	if f, _ := tr.Observe(count, []Sample{c("GPU-a", "13", 1), c("GPU-a", "79", 1), c("GPU-b", "48", 9)}); len(f) != 0 {
		t.Fatalf("a forgotten GPU back fired: %s", codes(f))
	}
}
