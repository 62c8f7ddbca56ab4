package temporalserver

import (
	"fmt"
	"io"
	"strings"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// fatalLogger also writes the server's fatal errors to out (stderr). The server exits the process
// right after one (a port taken between being picked and bound, say), and its log file may go with
// a test's or a dev run's temp dir: without this the process ends with no word of why.
type fatalLogger struct {
	log.Logger
	out  io.Writer
	with []tag.Tag // the tags of With, shown with each fatal error
}

func (l fatalLogger) Fatal(msg string, tags ...tag.Tag) {
	var b strings.Builder
	for _, t := range append(l.with[:len(l.with):len(l.with)], tags...) {
		fmt.Fprintf(&b, " %s=%v", t.Key(), t.Value())
	}
	fmt.Fprintf(l.out, "embedded Temporal server: fatal: %s%s\n", msg, b.String())
	l.Logger.Fatal(msg, tags...)
}

// With keeps the fatal errors visible in the loggers the server derives.
func (l fatalLogger) With(tags ...tag.Tag) log.Logger {
	return fatalLogger{log.With(l.Logger, tags...), l.out, append(l.with[:len(l.with):len(l.with)], tags...)}
}
