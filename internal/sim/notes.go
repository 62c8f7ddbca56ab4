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

// The simulated driver keeps its per-device state (faults, XIDs, recovery actions) in annotations
// on the slice that keeps a pool's faults (faultSlice): each a JSON object from device name to
// the device's value.

// readNotes reads one such annotation. One that does not parse (edited by hand) means none.
func readNotes[T any](s *resourcev1.ResourceSlice, key string) map[string]T {
	notes := map[string]T{}
	if v := s.Annotations[key]; v != "" {
		_ = json.Unmarshal([]byte(v), &notes)
	}
	return notes
}

// writeNotes writes one such annotation.
func writeNotes[T any](s *resourcev1.ResourceSlice, key string, notes map[string]T) {
	data, _ := json.Marshal(notes) // a map of plain values always encodes
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[key] = string(data)
}

// updateNotes changes one such annotation of the device's pool with change, which is given the
// pool's slices and says whether there is anything to write.
func updateNotes[T any](ctx context.Context, cs kubernetes.Interface, id device.ID, key string, change func(pool []resourcev1.ResourceSlice, notes map[string]T) bool) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pool, err := poolSlices(ctx, cs, id)
		if err != nil {
			return err
		}
		s := faultSlice(pool)
		notes := readNotes[T](s, key)
		if !change(pool, notes) {
			return nil
		}
		writeNotes(s, key, notes)
		_, err = cs.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
}
