package policy

import (
	"strings"
	"testing"
	"time"
)

// A policy's causes block overrides the catalogue per entry and sets the application-fault
// threshold; what it leaves out keeps the defaults.
func TestCausesBlock(t *testing.T) {
	set, err := Parse([]byte(`default:
  causes:
    rules:
      - {xids: [79], first: reset}
      - {codes: [health], actions: [contact_support], first: retire}
      - {xids: [48], first: reset, thenRetire: true}
      - {xids: [1, 999], first: ladder}
    applicationFaults: {limit: 3}
policies:
  - name: fpga
    match: {driver: fpga.example.com}
    causes: {off: true}
drivers:
  fpga.example.com: {identity: [serial]}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := set.For("", "gpu.example.com")
	if n := len(p.Causes.Rules); n != 4 || p.Causes.Rules[0].First != FirstReset || p.Causes.Rules[1].Actions[0] != "CONTACT_SUPPORT" || !p.Causes.Rules[2].ThenRetire {
		t.Fatalf("rules %+v", p.Causes.Rules)
	}
	if got := p.Causes.AppFaultLimit(); got.Limit != 3 || got.Window.D() != time.Hour {
		t.Fatalf("threshold %+v", got)
	}
	if f := set.For("", "fpga.example.com"); !f.Causes.Off || len(f.Causes.Rules) != 4 {
		t.Fatalf("an entry inherits the default's rules and turns causes off: %+v", f.Causes)
	}
	if got := Default().Causes.AppFaultLimit(); got != DefaultApplicationFaults {
		t.Fatalf("default threshold %+v", got)
	}
}

// A causes table with an unknown step, a cause listed twice or a threshold that cannot be reached
// is refused with the rule it is in.
func TestBadCauses(t *testing.T) {
	for _, tt := range []struct{ causes, want string }{
		{`rules: [{xids: [79], first: reboot}]`, `causes.rules[0]: first "reboot": want one of none, reset, node, retire, ladder`},
		{`rules: [{xids: [79]}]`, `first ""`},
		{`rules: [{first: reset}]`, "causes.rules[0]: names no xid, code or action"},
		{`rules: [{xids: [79], first: node}, {xids: [13, 79], first: none}]`, "causes.rules[1]: xid 79 is listed twice (first in causes.rules[0])"},
		{`rules: [{codes: [row-remap-failure, row-remap-failure], first: retire}]`, "code row-remap-failure is listed twice"},
		{`rules: [{actions: [none], first: none}, {actions: [NONE], first: reset}]`, "action NONE is listed twice"},
		{`rules: [{xids: [0], first: reset}]`, "xid 0: want 1 to 999"},
		{`rules: [{xids: [1000], first: reset}]`, "xid 1000: want 1 to 999"},
		{`rules: [{xids: [13], first: none, thenRetire: true}]`, `thenRetire follows a reset or node step, not "none"`},
		{`applicationFaults: {limit: -1}`, "causes.applicationFaults: want a limit of at least 1"},
		{`applicationFaults: {window: -1m}`, "causes.applicationFaults"},
		{`applicationFaults: {limit: 3, window: 721h}`, "causes.applicationFaults.window: at most 720h0m0s (a device's history keeps 30 days)"},
		{`rules: [{xids: [seventy-nine], first: node}]`, "cannot unmarshal"},
		{`colour: red`, "colour"},
	} {
		set, err := Parse([]byte("default:\n  causes: {" + tt.causes + "}\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, %v; want an error with %q", tt.causes, set, err, tt.want)
		}
	}
}
