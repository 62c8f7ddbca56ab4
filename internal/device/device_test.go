package device

import (
	"regexp"
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

func TestTaintRuleNameIsDeterministicAndValid(t *testing.T) {
	dns := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	a := ID{"gpu.sim.devicewarden.io", "node-1", "GPU_0"}
	b := ID{"gpu.sim.devicewarden.io", "node-2", "GPU_0"}
	if a.TaintRuleName() != a.TaintRuleName() {
		t.Fatal("name is not deterministic")
	}
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
	for _, s := range []string{"Healthy", "Unhealthy", "Unknown"} {
		if _, err := ParseHealth(s); err != nil {
			t.Fatalf("ParseHealth(%q): %v", s, err)
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
