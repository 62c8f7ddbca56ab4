// Package poll waits in tests for a condition the system reaches on its own time: a controller, a
// watch or a workflow acting on a real cluster or server.
package poll

import (
	"testing"
	"time"
)

// Until calls cond every 50 ms until it returns nil, and fails the test with what and cond's last
// error if timeout passes first.
func Until(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s: %v", what, timeout, err)
}
