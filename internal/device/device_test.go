package device

import (
	"regexp"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	tests := []struct {
		in      string
		want    ID
		wantErr bool
	}{
		{in: "gpu.sim.devicewarden.io/node-1/gpu-0", want: ID{"gpu.sim.devicewarden.io", "node-1", "gpu-0"}},
		{in: "gpu.sim.devicewarden.io/node-1", wantErr: true},
		{in: "example.com/fpga/node-1/fpga-3", want: ID{"example.com/fpga", "node-1", "fpga-3"}},
		{in: "a/b/c/d/e", wantErr: true},
		{in: "/fpga/node-1/fpga-3", wantErr: true},
		{in: "a//c", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseID(tt.in)
		if (err != nil) != tt.wantErr {
			t.Fatalf("ParseID(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
		}
		if !tt.wantErr && got != tt.want {
			t.Fatalf("ParseID(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestTaintRuleNameIsDistinctAndValid(t *testing.T) {
	dns := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	a := ID{"gpu.sim.devicewarden.io", "node-1", "GPU_0"}
	b := ID{"gpu.sim.devicewarden.io", "node-2", "GPU_0"}
	if a.TaintRuleName() == b.TaintRuleName() {
		t.Fatal("different devices share a rule name")
	}
	for _, id := range []ID{a, {"d", "p", "---"}, {"d", "p", "a-very-long-device-name-that-goes-on-and-on-and-on"}} {
		if n := id.TaintRuleName(); !dns.MatchString(n) || len(n) > 63 {
			t.Fatalf("invalid rule name %q", n)
		}
	}
}

func TestParseHealth(t *testing.T) {
	for s, want := range map[string]Health{"Healthy": Healthy, "Unhealthy": Unhealthy, "Unknown": Unknown} {
		if h, err := ParseHealth(s); err != nil || h != want {
			t.Fatalf("ParseHealth(%q) = %q, %v; want %q", s, h, err, want)
		}
	}
	for _, s := range []string{"", "healthy", "Degraded"} {
		if _, err := ParseHealth(s); err == nil {
			t.Fatalf("ParseHealth(%q) accepted an unknown value", s)
		}
	}
	if !(Unhealthy.Severity() > Unknown.Severity() && Unknown.Severity() > Healthy.Severity()) {
		t.Fatal("severity order wrong")
	}
}

func TestDevicePluginIdentity(t *testing.T) {
	dp := ID{Driver: "example.com/fpga", Pool: "node-1", Device: "fpga-3"}
	if !dp.Valid() || !dp.DevicePlugin() || dp.WorkflowID() != "device/example.com/fpga/node-1/fpga-3" {
		t.Fatalf("%+v valid=%v dp=%v wf=%s", dp, dp.Valid(), dp.DevicePlugin(), dp.WorkflowID())
	}
	if back, err := ParseID(dp.String()); err != nil || back != dp {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if (ID{Driver: "gpu.example.com", Pool: "p", Device: "d"}).DevicePlugin() {
		t.Fatal("a DRA driver is not a device plugin")
	}
}

// Rule names are pinned: DeviceWarden finds a device's rule by its name, so a change to how names
// are made would leave every existing rule behind and create a second one per device after an
// upgrade. A change here must come with a migration.
func TestTaintRuleNamesArePinned(t *testing.T) {
	for id, want := range map[ID]string{
		{Driver: "gpu.sim.devicewarden.io", Pool: "node-1", Device: "gpu-0"}: "devicewarden-gpu-0-076733247c88c362",
		{Driver: "gpu.example.com", Pool: "pool-a", Device: "GPU_7.Big"}:     "devicewarden-gpu-7-big-da2cd5e7de9390ef",
		{Driver: "nvidia.com/gpu", Pool: "node-2", Device: "GPU-3f2a"}:       "devicewarden-gpu-3f2a-ddadff8173116b59",
	} {
		if got := id.TaintRuleName(); got != want {
			t.Errorf("%s: rule name %q, pinned %q", id, got, want)
		}
	}
}

// A long device name is cut to 30 characters in its rule's name, whose length is then fixed.
func TestTaintRuleNameCutsALongDeviceName(t *testing.T) {
	id := ID{Driver: "gpu.example.com", Pool: "node-1", Device: strings.Repeat("g", 40)}
	if n := id.TaintRuleName(); len(n) != len("devicewarden-")+30+1+16 || !strings.HasPrefix(n, "devicewarden-"+strings.Repeat("g", 30)+"-") {
		t.Fatalf("rule name %q (%d characters)", n, len(n))
	}
}
