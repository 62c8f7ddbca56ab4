package remediation

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/devicewarden/devicewarden/internal/notify"
)

// In a storm the breaker holds every device past its cap, and each held device has an alert to
// send. One Alert activity each costs the Temporal server an activity task and a workflow task
// per device; instead the permit request carries the alert, and a held device's alert is logged
// and counted at once and reaches people with the others held, as one alert per channel every
// HeldAlertEvery. The breaker's own alert says that it opened and why.

// HeldAlertEvery is how often a worker sends the alerts of the devices the breaker held.
const HeldAlertEvery = 5 * time.Second

// maxHeldListed bounds how many devices one summary names.
const maxHeldListed = 20

type heldAlerts struct {
	mu       sync.Mutex
	pending  []notify.AlertInput
	title    string // the summary's first line, after how many
	flushing bool
	every    time.Duration // HeldAlertEvery unless set (tests)
}

// holdAlert takes the alert of a device whose automatic action the breaker held.
func (v alertHolder) holdAlert(in notify.AlertInput, held string) {
	a := v.a
	v.gather(&a.held, in, "devices held by the circuit breaker ("+held+"); each waits for an operator's resume:", "held", held)
}

// NoteAlert takes an alert that a fleet-wide event raises on many devices at once (an Unknown
// report tolerated, a device Healthy again within its window), run as a local activity: it is
// logged and counted at once and reaches people with the others of the last few seconds, so a
// fleet that turns Unknown at once costs one Slack message, not one activity per device.
func (a *Activities) NoteAlert(_ context.Context, in notify.AlertInput) error {
	(alertHolder{a}).gather(&a.notes, in, "device alerts in the last seconds:")
	return nil
}

// gather logs and counts an alert and queues it for the next summary of h.
func (v alertHolder) gather(h *heldAlerts, in notify.AlertInput, title string, attrs ...any) {
	a := v.a
	slog.Default().Log(context.Background(), alertLevel(in.Level), "alert", append([]any{"level", in.Level, "text", in.Text,
		"workflow", in.WorkflowID, "device", in.Device.String()}, attrs...)...)
	if a.Metrics != nil {
		a.Metrics.Alerts.WithLabelValues(in.Level).Inc()
	}
	if a.Alerter == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pending) < 100000 {
		h.pending = append(h.pending, in)
	}
	h.title = title
	if !h.flushing {
		h.flushing = true
		go v.flushHeld(h)
	}
}

// flushHeld sends what h gathered, every HeldAlertEvery while there is any.
func (v alertHolder) flushHeld(h *heldAlerts) {
	a := v.a
	every := HeldAlertEvery
	if h.every > 0 {
		every = h.every
	}
	for {
		time.Sleep(every)
		h.mu.Lock()
		batch, title := h.pending, h.title
		h.pending = nil
		if len(batch) == 0 {
			h.flushing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		for _, in := range heldSummaries(batch, title) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := a.Alerter.Alert(ctx, in); err != nil {
				slog.Default().Warn("held devices' alert not delivered", "error", err, "devices", len(batch))
			}
			cancel()
		}
	}
}

// heldSummaries makes one alert per channel of the alerts gathered together: the most severe level,
// how many, and the first devices with their reasons.
func heldSummaries(batch []notify.AlertInput, title string) []notify.AlertInput {
	byChannel := map[string][]notify.AlertInput{}
	var channels []string
	for _, in := range batch {
		if _, ok := byChannel[in.Channel]; !ok {
			channels = append(channels, in.Channel)
		}
		byChannel[in.Channel] = append(byChannel[in.Channel], in)
	}
	sort.Strings(channels)
	out := make([]notify.AlertInput, 0, len(channels))
	for _, ch := range channels {
		ins := byChannel[ch]
		level := "info"
		for _, in := range ins {
			if severity(in.Level) > severity(level) {
				level = in.Level
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d %s", len(ins), title)
		for i, in := range ins {
			if i == maxHeldListed {
				fmt.Fprintf(&b, "\n... and %d more (devicewarden device list)", len(ins)-maxHeldListed)
				break
			}
			fmt.Fprintf(&b, "\n%s: %s", in.Device.String(), in.Text)
		}
		out = append(out, notify.AlertInput{Level: level, Text: b.String(), Channel: ch})
	}
	return out
}

func severity(level string) int {
	switch level {
	case "critical":
		return 2
	case "warning":
		return 1
	}
	return 0
}
