package sim

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/device"
)

// AnnotationRecovery holds, on a pool's slice, the driver's recovery action for each simulated
// GPU that has one (a JSON object from device name to NVML's number: 1 GPU reset, 2 node reboot,
// 3 drain peer-to-peer, 4 drain and reset). dcgm-exporter shows it as
// DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION. A node reboot clears every action of the node's GPUs; a
// reset clears a GPU reset's.
const AnnotationRecovery = "sim.devicewarden.io/recovery-actions"

// Recovery actions the simulated driver states (NVML's numbers).
const (
	RecoveryGPUReset   = 1
	RecoveryNodeReboot = 2
)

// SetRecoveryAction states the driver's recovery action for the GPU (0: none).
func SetRecoveryAction(ctx context.Context, cs kubernetes.Interface, id device.ID, action int) error {
	return updateNotes(ctx, cs, id, AnnotationRecovery, func(_ []resourcev1.ResourceSlice, actions map[string]int) bool {
		if action == 0 {
			delete(actions, id.Device)
		} else {
			actions[id.Device] = action
		}
		return true
	})
}

// clearRecovery drops every recovery action of the slice's GPUs (a reboot); it says whether
// there was any.
func clearRecovery(s *resourcev1.ResourceSlice) bool {
	if len(readNotes[int](s, AnnotationRecovery)) == 0 {
		return false
	}
	writeNotes(s, AnnotationRecovery, map[string]int{})
	return true
}

// resetRecovery clears the GPU's recovery action when a reset is what it asked for.
func resetRecovery(ctx context.Context, cs kubernetes.Interface, id device.ID) error {
	return updateNotes(ctx, cs, id, AnnotationRecovery, func(_ []resourcev1.ResourceSlice, actions map[string]int) bool {
		if actions[id.Device] != RecoveryGPUReset {
			return false
		}
		delete(actions, id.Device)
		return true
	})
}
