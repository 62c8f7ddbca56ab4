package cause

import (
	"testing"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// Read finds the cause in each source's usual form, and leaves unsaid what none says.
func TestRead(t *testing.T) {
	for _, tt := range []struct {
		code, action, message string
		want                  Cause
	}{
		{"", "", "XID 79", Cause{XID: 79}},
		{"", "", "NVRM: Xid (PCI:0000:3B:00): 79, pid=1234, GPU has fallen off the bus.", Cause{XID: 79, PCI: "0000:3b:00"}},
		{"", "", "Xid (PCI:0000:3b:00.0): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error", Cause{XID: 48, PCI: "0000:3b:00.0"}},
		{"", "", "xid=13 graphics engine exception", Cause{XID: 13}},
		{"", "", "device unhealthy: Xid: 31", Cause{XID: 31}},
		{"xid:79", "", "dcgm: xid:79", Cause{Code: "xid:79", XID: 79}},
		{"xid-count:64", "", "", Cause{Code: "xid-count:64", XID: 64}},
		{"recovery-action:2", "", "", Cause{Code: "recovery-action:2", Recovery: RecoveryNodeReboot}},
		{"recovery-action:9", "", "", Cause{Code: "recovery-action:9"}},
		{"row-remap-failure", "", "", Cause{Code: "row-remap-failure"}},
		{"XidCriticalError", "", `{"31":true,"48":false}`, Cause{Code: "XidCriticalError", XID: 31}},
		{"XIDErrors", "", "GPU 0 saw XID 79 at 10:02", Cause{Code: "XIDErrors", XID: 79}},
		{"xid:79", "component_reset ", "Xid (PCI:0000:3b:00): 79", Cause{Code: "xid:79", XID: 79, PCI: "0000:3b:00", Action: "COMPONENT_RESET"}},
		// A message naming another XID than the code keeps the code's, without the other's PCI.
		{"xid:79", "", "Xid (PCI:0000:3b:00): 48", Cause{Code: "xid:79", XID: 79}},
		// Not XIDs: a word that merely contains xid, a number out of range, no number.
		{"", "", "maxidle 5", Cause{}},
		{"", "", "XID 100000", Cause{}},
		{"", "", "xid unknown", Cause{}},
		{"xid:0", "", "", Cause{Code: "xid:0"}},
		{"", "", "XID 0", Cause{}},
		{"", "", "Xid (PCI:0000:3b:00): 0", Cause{}},
		{"", "", "XID 999", Cause{XID: 999}},
		{"", "", "XID 1000", Cause{}},
		{"GPUCondition", "", `{"0":true}`, Cause{Code: "GPUCondition"}},
		{"GPUCondition", "", `{"999":true}`, Cause{Code: "GPUCondition", XID: 999}},
		// NVSentinel's template: the XID alone, or a list (the one the device needs most).
		{"79", "", "", Cause{Code: "79", XID: 79}},
		{"31,79,48", "", "", Cause{Code: "31,79,48", XID: 79}},
		{"31, 48", "", "", Cause{Code: "31, 48", XID: 48}},
		{"79,x", "", "", Cause{Code: "79,x"}},
		// A row-remap failure said in words is that cause, not an unknown one.
		{"", "", "Row Remapper: Failed to remap row", Cause{Code: "row-remap-failure"}},
		{"", "", "GPU 3: row remap failure", Cause{Code: "row-remap-failure"}},
		{"", "", "row remapping failed on bank 2", Cause{Code: "row-remap-failure"}},
		{"", "", "row remapping pending", Cause{}},
		{"GPUCondition", "", `{"1000":true}`, Cause{Code: "GPUCondition"}},
		{"GPUCondition", "", `{"79":true,"31":true,"48":true}`, Cause{Code: "GPUCondition", XID: 31}},
		{"GPUCondition", "", `{"13":false,"48":true}`, Cause{Code: "GPUCondition", XID: 48}},
		{"", "", `{"not json`, Cause{}},
	} {
		if got := Read(tt.code, tt.action, tt.message); got != tt.want {
			t.Errorf("Read(%q, %q, %q) = %+v, want %+v", tt.code, tt.action, tt.message, got, tt.want)
		}
	}
}

// Every catalogue class and every recovery action chooses its first step; the driver's recovery
// action wins over the XID table; the policy's rules win over both.
func TestChoose(t *testing.T) {
	override := policy.Causes{Rules: []policy.CauseRule{
		{XIDs: []int{79}, First: policy.FirstReset},
		{Codes: []string{"health"}, First: policy.FirstRetire},
		{Actions: []string{"CONTACT_SUPPORT"}, First: policy.FirstRetire},
	}}
	for _, tt := range []struct {
		name  string
		c     Cause
		p     policy.Causes
		first policy.First
		then  bool
		why   string
	}{
		{"application 13", Cause{XID: 13}, policy.Causes{}, policy.FirstNone, false, "catalogue: xid 13"},
		{"application 31", Cause{XID: 31}, policy.Causes{}, policy.FirstNone, false, "catalogue: xid 31"},
		{"ignore 43", Cause{XID: 43}, policy.Causes{}, policy.FirstNone, false, "catalogue: xid 43"},
		{"reset 48", Cause{XID: 48}, policy.Causes{}, policy.FirstReset, false, "catalogue: xid 48"},
		{"reset 119", Cause{XID: 119}, policy.Causes{}, policy.FirstReset, false, "catalogue: xid 119"},
		{"reset then retire 64", Cause{XID: 64}, policy.Causes{}, policy.FirstReset, true, "catalogue: xid 64"},
		{"reboot 79", Cause{Code: "xid:79", XID: 79}, policy.Causes{}, policy.FirstNode, false, "catalogue: xid 79"},
		{"replace row remap", Cause{Code: "row-remap-failure"}, policy.Causes{}, policy.FirstRetire, false, "catalogue: code row-remap-failure"},
		{"reset applies a remap", Cause{Code: "uncorrectable-remapped-rows"}, policy.Causes{}, policy.FirstReset, false, "catalogue: code uncorrectable-remapped-rows"},
		{"nvsentinel reset", Cause{Action: "COMPONENT_RESET"}, policy.Causes{}, policy.FirstReset, false, "catalogue: action COMPONENT_RESET"},
		{"nvsentinel reboot", Cause{Action: "RESTART_BM"}, policy.Causes{}, policy.FirstNode, false, "catalogue: action RESTART_BM"},
		{"nvsentinel app", Cause{Action: "RESTART_APP"}, policy.Causes{}, policy.FirstNone, false, "catalogue: action RESTART_APP"},
		{"nvsentinel replace", Cause{Action: "REPLACE_VM"}, policy.Causes{}, policy.FirstRetire, false, "catalogue: action REPLACE_VM"},
		{"recovery none", Cause{Recovery: RecoveryNone}, policy.Causes{}, policy.FirstNone, false, "recovery action none"},
		{"recovery reset", Cause{Recovery: RecoveryGPUReset}, policy.Causes{}, policy.FirstReset, false, "recovery action gpu-reset"},
		{"recovery reboot", Cause{Recovery: RecoveryNodeReboot}, policy.Causes{}, policy.FirstNode, false, "recovery action node-reboot"},
		{"recovery drain p2p", Cause{Recovery: RecoveryDrainP2P}, policy.Causes{}, policy.FirstReset, false, "recovery action drain-p2p"},
		{"recovery drain and reset", Cause{Recovery: RecoveryDrainAndReset}, policy.Causes{}, policy.FirstReset, false, "recovery action drain-and-reset"},
		{"recovery bus reset", Cause{Recovery: RecoveryBusReset}, policy.Causes{}, policy.FirstReset, false, "recovery action bus-reset"},
		{"recovery system reboot", Cause{Recovery: RecoverySystemReboot}, policy.Causes{}, policy.FirstNode, false, "recovery action system-reboot"},
		{"recovery imex: unknown", Cause{Recovery: RecoveryIMEXDomain}, policy.Causes{}, policy.FirstLadder, false, "unknown cause"},
		{"recovery wins over the table", Cause{XID: 79, Recovery: RecoveryGPUReset}, policy.Causes{}, policy.FirstReset, false, "recovery action gpu-reset"},
		{"policy wins over the table", Cause{XID: 79}, override, policy.FirstReset, false, "policy rule: xid 79"},
		{"policy wins over recovery", Cause{XID: 79, Recovery: RecoveryNodeReboot}, override, policy.FirstReset, false, "policy rule: xid 79"},
		{"policy code by name", Cause{Code: "health:memory"}, override, policy.FirstRetire, false, "policy rule: code health:memory"},
		{"policy action", Cause{Action: "CONTACT_SUPPORT"}, override, policy.FirstRetire, false, "policy rule: action CONTACT_SUPPORT"},
		{"not overridden: table", Cause{XID: 13}, override, policy.FirstNone, false, "catalogue: xid 13"},
		{"unknown xid", Cause{XID: 74}, policy.Causes{}, policy.FirstLadder, false, "unknown cause"},
		{"no cause", Cause{}, policy.Causes{}, policy.FirstLadder, false, "unknown cause"},
		{"off", Cause{XID: 13}, policy.Causes{Off: true}, policy.FirstLadder, false, "causes are off in the policy"},
	} {
		got := Choose(tt.c, tt.p)
		if got.First != tt.first || got.ThenRetire != tt.then || got.Why != tt.why {
			t.Errorf("%s: Choose = %+v, want %s (then retire %t) by %q", tt.name, got, tt.first, tt.then, tt.why)
		}
	}
}

func TestCauseString(t *testing.T) {
	for c, want := range map[Cause]string{
		{XID: 79, PCI: "0000:3b:00", Recovery: RecoveryGPUReset}: "xid 79 (PCI 0000:3b:00), recovery gpu-reset",
		{Code: "row-remap-failure"}:                              "row-remap-failure",
		{Code: "xid:13", XID: 13, Action: "RESTART_APP"}:         "xid 13, recommended RESTART_APP",
		{}: "",
	} {
		if got := c.String(); got != want {
			t.Errorf("%+v: %q, want %q", c, got, want)
		}
	}
	if (Cause{}).Known() || !(Cause{XID: 1}).Known() {
		t.Fatal("Known")
	}
}

// A cause's class is bounded by what the sources say: never a PCI address or a message.
func TestCauseClass(t *testing.T) {
	for c, want := range map[Cause]string{
		{XID: 48, PCI: "0000:3b:00", Recovery: RecoveryGPUReset}: "xid 48",
		{Code: "row-remap-failure"}:                              "row-remap-failure",
		{Recovery: RecoveryNodeReboot}:                           "recovery node-reboot",
		{Action: "COMPONENT_RESET"}:                              "component_reset",
		{}:                                                       "unknown",
	} {
		if got := c.Class(); got != want {
			t.Errorf("%+v: %q, want %q", c, got, want)
		}
	}
}

// A recovery action is read by NVML's number or name, in the forms sources write it.
func TestParseRecovery(t *testing.T) {
	for in, want := range map[string]Recovery{
		"0": RecoveryNone, "1": RecoveryGPUReset, " 2 ": RecoveryNodeReboot, "4": RecoveryDrainAndReset, "7": RecoverySystemReboot,
		"gpu-reset": RecoveryGPUReset, "NODE_REBOOT": RecoveryNodeReboot, "NVML_GPU_RECOVERY_ACTION_DRAIN_P2P": RecoveryDrainP2P,
		"GPU_RECOVERY_ACTION_BUS_RESET": RecoveryBusReset,
	} {
		if got, ok := ParseRecovery(in); !ok || got != want {
			t.Errorf("ParseRecovery(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "8", "-1", "reboot", "gpu reset"} {
		if got, ok := ParseRecovery(bad); ok {
			t.Errorf("ParseRecovery(%q) = %q, want refused", bad, got)
		}
	}
}

// When a device has several faults pending, the device's outranks the application's, and what
// the device needs most comes first.
func TestRankPutsTheDeviceBeforeTheApplication(t *testing.T) {
	app, reset, node := Cause{XID: 31}, Cause{XID: 119}, Cause{Recovery: RecoveryNodeReboot}
	if !(Rank(app) < Rank(Cause{Code: "unheard-of"}) && Rank(Cause{Code: "unheard-of"}) < Rank(reset) && Rank(reset) < Rank(node)) {
		t.Fatalf("ranks: application %d, unknown %d, reset %d, node %d", Rank(app), Rank(Cause{Code: "unheard-of"}), Rank(reset), Rank(node))
	}
}
