package watcher

import (
	"context"
	"encoding/json"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/devicewarden/devicewarden/internal/healthreport"
)

// ReportStatusQPS bounds the status writes DeviceWarden makes to DeviceHealthReports: a flood of
// reports costs the apiserver at most this many writes a second, and never holds up a device's
// signal (the writes leave the signal path).
const ReportStatusQPS = 50

// statusWriter writes reports' statuses in the background, one merge patch per report, the
// newest status of a report replacing one not yet written.
type statusWriter struct {
	mu      sync.Mutex
	pending map[string]healthreport.Status
	order   []string
	wake    chan struct{}
}

// ready makes the zero writer usable. Callers hold s.mu.
func (s *statusWriter) ready() {
	if s.pending == nil {
		s.pending, s.wake = map[string]healthreport.Status{}, make(chan struct{}, 1)
	}
}

// put queues a report's status.
func (s *statusWriter) put(name string, st healthreport.Status) {
	s.mu.Lock()
	s.ready()
	if _, queued := s.pending[name]; !queued {
		s.order = append(s.order, name)
	}
	s.pending[name] = st
	wake := s.wake
	s.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued status ("" when none).
func (s *statusWriter) next() (string, healthreport.Status, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready()
	if len(s.order) == 0 {
		return "", healthreport.Status{}, s.wake
	}
	name := s.order[0]
	s.order = s.order[1:]
	st := s.pending[name]
	delete(s.pending, name)
	return name, st, s.wake
}

// writeStatuses writes queued statuses until ctx ends, at most ReportStatusQPS a second.
func (w *Watcher) writeStatuses(ctx context.Context) {
	limit := flowcontrol.NewTokenBucketRateLimiter(ReportStatusQPS, ReportStatusQPS)
	for ctx.Err() == nil {
		name, st, wake := w.statuses.next()
		if name == "" {
			select {
			case <-wake:
			case <-ctx.Done():
			}
			continue
		}
		if limit.Wait(ctx) != nil {
			return
		}
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"outcome": st.Outcome, "device": st.Device,
			"workflow": st.Workflow, "reason": st.Reason, "observedGeneration": st.ObservedGeneration}})
		w.cfg.Metrics.WatcherEvents.WithLabelValues("report", "status-write").Inc()
		if _, err := w.cfg.Reports.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			// A report deleted meanwhile needs no status. A Delivered status not written makes a
			// watcher that restarts send the fault once more, which its quarantine takes as a
			// report of a fenced device.
			w.cfg.Logger.Debug("device health report status not written", "report", name, "outcome", st.Outcome, "error", err)
		}
	}
}
