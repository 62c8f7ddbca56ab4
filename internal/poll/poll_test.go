package poll

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
	if len(args) > 0 {
		f.failed = args[0].(string)
	}
}

func TestUntil(t *testing.T) {
	n := 0
	Until(t, time.Second, "third call", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("stopped after %d calls", n)
	}
	f := &fakeT{}
	Until(f, 120*time.Millisecond, "never", func() error { return errors.New("no") })
	if !strings.Contains(f.failed, "never") {
		t.Fatalf("a condition never true did not fail: %q", f.failed)
	}
}
