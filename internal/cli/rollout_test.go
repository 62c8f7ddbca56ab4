package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// A phase whose enable failed shows as partly enabled, with what resume and rollback do.
func TestPrintRolloutShowsAPartlyEnabledPhase(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := &api.RolloutStatus{Plan: "gpu", State: "blocked", Enabled: []rolloutplan.PhaseChange{
		{Phase: "canary", At: at, Nodes: []rolloutplan.NodeChange{{Node: "a"}, {Node: "b"}}},
		{Phase: "wide", At: at, Partial: true},
	}}
	var out bytes.Buffer
	if err := printRollout(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"canary on 2 node(s) at 2026-12-01T12:00:00Z", "wide partly: its enable failed at 2026-12-01T12:00:00Z (resume finishes it, rollback routes its switched nodes back)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
