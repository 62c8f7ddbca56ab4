package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/devicehistory"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// deviceHistory reads and writes the device's history outside its run (decision 0008, version
// 17): a run reads its node's record before its first event that may count the history (any
// but a report of Healthy or Unknown), and writes the device's entry before it ends or
// continues as new, when the entry changed. A device that only blinks Unknown costs nothing.
type deviceHistory struct {
	on bool
	// fresh: the run started without a carried state, or with one whose run never read the
	// record (api.DeviceInput.HistoryUnread), so the record holds what it does not.
	fresh bool
	// tried: the read before the first decision was made (it may have failed).
	tried bool
	// known: written is what the record holds for the device.
	known   bool
	written decide.History
}

func newDeviceHistory(on, fresh bool) *deviceHistory {
	return &deviceHistory{on: on, fresh: fresh}
}

// before recalls the history ahead of an event that may count it. The read waits a minute at
// most: fencing a failed device never waits on the record. If it fails, the device counts from
// this run's faults until the run ends, when it is read again before the write.
func (h *deviceHistory) before(ctx workflow.Context, st *decide.DeviceState, ev decide.Event) {
	if !h.on || !h.fresh || h.tried || quietEvent(ev) {
		return
	}
	h.tried = true
	// A local activity: the read sits between a fault and its fence, and a round trip through the
	// server's task queue would double the time to quarantine.
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second, ScheduleToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second},
	})
	var got decide.History
	in := devicehistory.ReadInput{Node: st.Node, Device: st.Device}
	if err := workflow.ExecuteLocalActivity(lctx, his.ReadDeviceHistory, in).Get(ctx, &got); err != nil {
		workflow.GetLogger(ctx).Warn("device history not read: the device counts from this run's faults", "error", err)
		return
	}
	h.recall(st, got)
}

// quietEvent is a report that counts nothing: Healthy, or Unknown within its tolerance.
func quietEvent(ev decide.Event) bool {
	return ev.Kind == decide.EventObserved && (ev.Observation.Health == device.Healthy || ev.Observation.Health == device.Unknown)
}

// unread says that the run's state does not hold the record: the run started without one (or
// from a run that had not read it) and has not read it since.
func (h *deviceHistory) unread() bool { return h.on && h.fresh && !h.known }

func (h *deviceHistory) read(ctx workflow.Context, st *decide.DeviceState) error {
	var got decide.History
	in := devicehistory.ReadInput{Node: st.Node, Device: st.Device}
	if err := workflow.ExecuteActivity(ctx, his.ReadDeviceHistory, in).Get(ctx, &got); err != nil {
		return err
	}
	h.recall(st, got)
	return nil
}

func (h *deviceHistory) recall(st *decide.DeviceState, got decide.History) {
	decide.Recall(st, got)
	h.written, h.known = got, true
}

// record writes the device's entry when it changed, before the run ends or continues as new.
// The write is retried until it is done: the run does not end with its history unwritten. A
// fresh run that has not read the record reads it first, so a write never drops what an
// earlier run left.
func (h *deviceHistory) record(ctx workflow.Context, st *decide.DeviceState) error {
	if !h.on {
		return nil
	}
	now := workflow.Now(ctx)
	next := decide.HistoryOf(st, now)
	if !h.known && next.Empty() {
		return nil // nothing this run adds, and nothing it knows the record holds
	}
	if h.fresh && !h.known {
		if err := h.read(kubeCallOptions(ctx), st); err != nil {
			return err
		}
		next = decide.HistoryOf(st, now)
	}
	if h.known && next.Equal(h.written) {
		return nil
	}
	in := devicehistory.WriteInput{Node: st.Node, Device: st.Device, History: next, Now: now}
	if err := workflow.ExecuteActivity(kubeCallOptions(ctx), his.WriteDeviceHistory, in).Get(ctx, nil); err != nil {
		return err
	}
	h.written, h.known = next, true
	return nil
}
