package worker

import (
	"context"
	"sync"

	"github.com/devicewarden/devicewarden/activities/devicehistory"
	"github.com/devicewarden/devicewarden/internal/decide"
)

// historyModel answers the device history activities from memory: the records a simulated
// cluster would hold, by node and device.
type historyModel struct {
	mu      sync.Mutex
	entries map[string]decide.History
}

func (h *historyModel) register(reg func(name string, fn any)) {
	h.entries = map[string]decide.History{}
	reg("ReadDeviceHistory", func(_ context.Context, in devicehistory.ReadInput) (decide.History, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.entries[in.Node+"|"+in.Device.String()], nil
	})
	reg("WriteDeviceHistory", func(_ context.Context, in devicehistory.WriteInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.entries[in.Node+"|"+in.Device.String()] = in.History
		return nil
	})
}
