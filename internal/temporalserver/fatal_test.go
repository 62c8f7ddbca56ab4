package temporalserver

import (
	"errors"
	"strings"
	"testing"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// A fatal error reaches stderr, from the logger and from the ones derived from it.
func TestFatalLoggerShowsFatalErrors(t *testing.T) {
	var out strings.Builder
	var l log.Logger = fatalLogger{Logger: log.NewNoopLogger(), out: &out}
	l.Fatal("Failed to start gRPC listener", tag.Error(errors.New("address already in use")))
	log.With(l, tag.Service("history")).Fatal("Failed to start ringpop listener")
	got := out.String()
	for _, want := range []string{"fatal: Failed to start gRPC listener error=address already in use", "fatal: Failed to start ringpop listener service=history"} {
		if !strings.Contains(got, want) {
			t.Fatalf("missing %q in %q", want, got)
		}
	}
	l.Warn("not fatal")
	if strings.Contains(out.String(), "not fatal") {
		t.Fatal("a warning was written as fatal")
	}
}
