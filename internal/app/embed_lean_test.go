//go:build lean

package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
)

// The lean build cannot embed Temporal: without an address it says so and which build can.
func TestLeanHasNoEmbeddedServer(t *testing.T) {
	_, err := ConnectTemporal(context.Background(), TemporalOptions{Namespace: "default", DBPath: t.TempDir() + "/temporal.db"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !errors.Is(err, ErrNoEmbeddedServer) || Embeds {
		t.Fatalf("ConnectTemporal without an address: %v (Embeds %v)", err, Embeds)
	}
}
