package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Backoff between attempts of a start-up step.
const (
	startFirstBackoff = time.Second
	startMaxBackoff   = 15 * time.Second
)

// startup runs the steps done once at start that need Temporal (reaching it, its search
// attributes, the workers, the breaker's configuration). A step that fails is retried with
// backoff until it succeeds or ctx ends: a Temporal that is recovering, slow or not yet reachable
// delays the process and keeps it not ready, it never ends it, so in a cluster the kubelet's
// restarts are not the retry loop. What it waits for is logged and answered by /readyz.
type startup struct {
	logger *slog.Logger
	// waiting is what /readyz reports while starting; nil once every step is done.
	waiting atomic.Pointer[string]
	// first and max bound the backoff (zero: the defaults).
	first, max time.Duration
}

func newStartup(logger *slog.Logger) *startup {
	s := &startup{logger: logger, first: startFirstBackoff, max: startMaxBackoff}
	s.wait("starting")
	return s
}

func (s *startup) wait(what string) { s.waiting.Store(&what) }

// done says that every step succeeded.
func (s *startup) done() { s.waiting.Store(nil) }

// Waiting is what the process still waits for, empty once started.
func (s *startup) Waiting() string {
	if p := s.waiting.Load(); p != nil {
		return *p
	}
	return ""
}

// retry runs step until it returns nil; it returns ctx's error if ctx ends first.
func (s *startup) retry(ctx context.Context, what string, step func(context.Context) error) error {
	backoff := s.first
	for attempt := 1; ; attempt++ {
		err := step(ctx)
		if err == nil {
			if attempt > 1 {
				s.logger.Info("start: done after retries", "step", what, "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.wait(fmt.Sprintf("%s (attempt %d): %v", what, attempt, err))
		s.logger.Warn("start: step failed; retrying", "step", what, "attempt", attempt, "retryIn", backoff, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.max)
	}
}
