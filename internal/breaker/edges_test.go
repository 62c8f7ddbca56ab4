package breaker

import (
	"strings"
	"testing"
)

func TestWaitListAfterContinueAsNew(t *testing.T) {
	b := &State{WakeWaiting: true, Waiting: []string{"d/p/a"}} // decoded: no lookup set yet
	b.AddWaiting([]string{"d/p/a", "d/p/b"})
	if strings.Join(b.Waiting, ",") != "d/p/a,d/p/b" {
		t.Fatalf("waiting %v", b.Waiting)
	}
}
