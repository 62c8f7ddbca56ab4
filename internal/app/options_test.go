package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/metrics"
)

// A negative worker cache size is refused before anything starts.
func TestRunControllerRefusesANegativeCacheSize(t *testing.T) {
	err := RunController(context.Background(), fake.NewClientset(), nil, ControllerOptions{WorkflowCacheSize: -1},
		metrics.New(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "workflow cache size -1: must not be negative") {
		t.Fatalf("cache size -1: %v", err)
	}
}
