package activities

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
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
	pending  []AlertInput
	reason   string
	flushing bool
	every    time.Duration // HeldAlertEvery unless set (tests)
}

// holdAlert takes the alert of a device whose automatic action the breaker held.
func (a *Activities) holdAlert(in AlertInput, held string) {
	slog.Default().Log(context.Background(), alertLevel(in.Level), "alert", "level", in.Level, "text", in.Text,
		"workflow", in.WorkflowID, "device", in.Device.String(), "held", held)
	if a.Metrics != nil {
		a.Metrics.Alerts.WithLabelValues(in.Level).Inc()
	}
	if a.Alerter == nil {
		return
	}
	h := &a.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pending) < 100000 {
		h.pending = append(h.pending, in)
	}
	h.reason = held
	if !h.flushing {
		h.flushing = true
		go a.flushHeld()
	}
}

// flushHeld sends what was held, every HeldAlertEvery while there is any.
func (a *Activities) flushHeld() {
	h := &a.held
	every := HeldAlertEvery
	if h.every > 0 {
		every = h.every
	}
	for {
		time.Sleep(every)
		h.mu.Lock()
		batch, reason := h.pending, h.reason
		h.pending = nil
		if len(batch) == 0 {
			h.flushing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		for _, in := range heldSummaries(batch, reason) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := a.Alerter.Alert(ctx, in); err != nil {
				slog.Default().Warn("held devices' alert not delivered", "error", err, "devices", len(batch))
			}
			cancel()
		}
	}
}

// heldSummaries makes one alert per channel of the alerts held together: the most severe level,
// how many, and the first devices with their reasons.
func heldSummaries(batch []AlertInput, reason string) []AlertInput {
	byChannel := map[string][]AlertInput{}
	var channels []string
	for _, in := range batch {
		if _, ok := byChannel[in.Channel]; !ok {
			channels = append(channels, in.Channel)
		}
		byChannel[in.Channel] = append(byChannel[in.Channel], in)
	}
	sort.Strings(channels)
	out := make([]AlertInput, 0, len(channels))
	for _, ch := range channels {
		ins := byChannel[ch]
		level := "info"
		for _, in := range ins {
			if severity(in.Level) > severity(level) {
				level = in.Level
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d devices held by the circuit breaker (%s); each waits for an operator's resume:", len(ins), reason)
		for i, in := range ins {
			if i == maxHeldListed {
				fmt.Fprintf(&b, "\n... and %d more (devicewarden device list)", len(ins)-maxHeldListed)
				break
			}
			fmt.Fprintf(&b, "\n%s: %s", in.Device.String(), in.Text)
		}
		out = append(out, AlertInput{Level: level, Text: b.String(), Channel: ch})
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
