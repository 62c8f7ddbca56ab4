package sim

import (
	"context"
	"encoding/json"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

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
	return updateRecovery(ctx, cs, id, func(actions map[string]int) bool {
		if action == 0 {
			delete(actions, id.Device)
		} else {
			actions[id.Device] = action
		}
		return true
	})
}

// updateRecovery changes the recovery actions of the GPU's pool with change, which says whether
// there is anything to write.
func updateRecovery(ctx context.Context, cs kubernetes.Interface, id device.ID, change func(map[string]int) bool) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pool, err := poolSlices(ctx, cs, id)
		if err != nil {
			return err
		}
		s := faultSlice(pool)
		actions := readRecovery(s)
		if !change(actions) {
			return nil
		}
		writeRecovery(s, actions)
		_, err = cs.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
}

func readRecovery(s *resourcev1.ResourceSlice) map[string]int {
	actions := map[string]int{}
	if v := s.Annotations[AnnotationRecovery]; v != "" {
		_ = json.Unmarshal([]byte(v), &actions) // a hand-edited annotation that does not parse means none
	}
	return actions
}

func writeRecovery(s *resourcev1.ResourceSlice, actions map[string]int) {
	data, _ := json.Marshal(actions)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationRecovery] = string(data)
}

// clearRecovery drops every recovery action of the slice's GPUs (a reboot); it says whether
// there was any.
func clearRecovery(s *resourcev1.ResourceSlice) bool {
	if len(readRecovery(s)) == 0 {
		return false
	}
	writeRecovery(s, map[string]int{})
	return true
}

// resetRecovery clears the GPU's recovery action when a reset is what it asked for.
func resetRecovery(ctx context.Context, cs kubernetes.Interface, id device.ID) error {
	return updateRecovery(ctx, cs, id, func(actions map[string]int) bool {
		if actions[id.Device] != RecoveryGPUReset {
			return false
		}
		delete(actions, id.Device)
		return true
	})
}
