package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func quietStartup() *startup { return loggedStartup(io.Discard) }

func loggedStartup(w io.Writer) *startup {
	s := newStartup(slog.New(slog.NewTextHandler(w, nil)))
	s.first, s.max = time.Millisecond, 4*time.Millisecond
	return s
}

// The log tells an operator each failed attempt and, once a step that failed succeeds, how many
// attempts it took; a step that succeeds at once logs nothing.
func TestStartupLogsRetriesAndTheirEnd(t *testing.T) {
	var log strings.Builder
	s := loggedStartup(&log)
	calls := 0
	_ = s.retry(context.Background(), "start worker", func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("namespace default not found")
		}
		return nil
	})
	got := log.String()
	if n := strings.Count(got, "start: step failed; retrying"); n != 2 {
		t.Errorf("%d failures logged, want 2:\n%s", n, got)
	}
	if !strings.Contains(got, `msg="start: done after retries" step="start worker" attempts=3`) {
		t.Errorf("no line for the step done after 3 attempts:\n%s", got)
	}
	log.Reset()
	_ = s.retry(context.Background(), "reach temporal", func(context.Context) error { return nil })
	if log.Len() != 0 {
		t.Errorf("a step done at once logged %q", log.String())
	}
}

// A step is tried until it succeeds; while it fails, what it waits for names the step, the
// attempt and the error.
func TestStartupRetriesUntilTheStepSucceeds(t *testing.T) {
	s := quietStartup()
	var seen []string
	calls := 0
	err := s.retry(context.Background(), "reach temporal", func(context.Context) error {
		calls++
		if calls > 1 {
			seen = append(seen, s.Waiting())
		}
		if calls < 4 {
			return errors.New("connection refused")
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("retry = %v after %d calls, want nil after 4", err, calls)
	}
	for i, w := range seen[:2] {
		if want := "reach temporal (attempt " + string(rune('1'+i)) + "): connection refused"; w != want {
			t.Errorf("waiting before call %d = %q, want %q", i+2, w, want)
		}
	}
	s.done()
	if w := s.Waiting(); w != "" {
		t.Fatalf("waiting after done = %q", w)
	}
}

// The backoff doubles up to its bound, and the end of the context ends the retries.
func TestStartupStopsWithItsContext(t *testing.T) {
	s := quietStartup()
	ctx, cancel := context.WithCancel(context.Background())
	var at []time.Time
	err := s.retry(ctx, "configure the breaker", func(context.Context) error {
		at = append(at, time.Now())
		if len(at) == 6 {
			cancel()
		}
		return errors.New("deadline exceeded")
	})
	if !errors.Is(err, context.Canceled) || len(at) != 6 {
		t.Fatalf("retry = %v after %d calls, want context.Canceled after 6", err, len(at))
	}
	if !strings.HasPrefix(s.Waiting(), "configure the breaker (attempt 5)") {
		t.Fatalf("waiting = %q", s.Waiting())
	}
	// Gaps of about 1, 2, 4, 4 ms: never shorter than the backoff they follow.
	for i, min := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < min {
			t.Errorf("gap %d = %s, want at least %s", i, gap, min)
		}
	}
}
