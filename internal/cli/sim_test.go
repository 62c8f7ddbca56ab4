//go:build !lean

package cli

import "testing"

// `sim health --recovery-action` takes NVML's number or its name, as a source writes it.
func TestRecoveryNumber(t *testing.T) {
	for in, want := range map[string]int{"none": 0, "0": 0, "gpu-reset": 1, "node-reboot": 2, "NODE_REBOOT": 2, "4": 4, "reboot-the-rack": -1, "99": -1} {
		if got := recoveryNumber(in); got != want {
			t.Errorf("recoveryNumber(%q) = %d, want %d", in, got, want)
		}
	}
}
