//go:build lean

package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/devicewarden/devicewarden/internal/app"
)

// In the lean build the one-machine commands say plainly that they are not in it and which build
// has them, whatever arguments they get.
func TestLeanStandIns(t *testing.T) {
	for _, args := range [][]string{{"dev"}, {"cluster", "build"}, {"sim", "health", "--device", "x/y/z"}, {"bench", "watcher", "--pods", "10"}} {
		_, err := run(t, nil, args...)
		if err == nil || !strings.Contains(err.Error(), "devicewarden "+args[0]+" is not in this build") ||
			!strings.Contains(err.Error(), "make build") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// run works as in the full build, except that it cannot embed Temporal: without an address it
// says so before touching anything, and the embedded server's flags do not exist.
func TestLeanRunNeedsATemporalAddress(t *testing.T) {
	_, err := run(t, nil, "run", "--kubeconfig", "/nonexistent", "--metrics-address", "")
	if !errors.Is(err, app.ErrNoEmbeddedServer) {
		t.Fatalf("run without --temporal-address: %v", err)
	}
	for _, flag := range []string{"--embed-temporal", "--temporal-listen=127.0.0.1:0", "--ui-listen="} {
		if _, err := run(t, nil, "run", flag); err == nil || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("run %s: %v", flag, err)
		}
	}
	// The operator commands are all there.
	for _, cmd := range []string{"device", "breaker", "migration", "approvals", "rollout", "capacity"} {
		if out, err := run(t, nil, cmd, "--help"); err != nil || !strings.Contains(out, "Usage:") {
			t.Errorf("%s --help: %v %q", cmd, err, out)
		}
	}
}

func TestLeanVersion(t *testing.T) {
	out, err := run(t, nil, "version", "-o", "json")
	var info struct{ Flavour string }
	if err != nil || json.Unmarshal([]byte(out), &info) != nil || info.Flavour != "lean" {
		t.Fatalf("version -o json: %v %q", err, out)
	}
}
