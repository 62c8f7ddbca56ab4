//go:build e2e

package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/bench"
	"github.com/devicewarden/devicewarden/internal/localcluster"
)

// TestAFleetOfAHundredNodes: `make bench`'s storm on a small fleet, 100 kwok nodes of 8 GPUs (800
// devices, their ResourceSlices and node Leases, a Pod on each GPU) and a node of 8 more. At rest
// the healthy fleet has no device workflow; 10% of it turns Unhealthy at once and every one of
// those 80 devices is decided, the default breaker acting on at most 20 and holding the rest, no
// healthy device gets a workflow, and five operator force-quarantines issued mid-storm each get
// their DeviceTaintRule. The bench fails a run that breaks any of these (internal/bench).
func TestAFleetOfAHundredNodes(t *testing.T) {
	onOwnStack(t) // mostly waits on the control plane and Temporal
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := &lockedBuilder{}
	err := bench.Storm(ctx, bench.StormOptions{Devices: 800, Healths: []string{"Unhealthy"}, Share: 0.1, Rest: 10 * time.Second,
		CacheDir: localcluster.DefaultCacheDir(), Out: out})
	t.Log("the storm bench's report:\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}

// lockedBuilder is a strings.Builder the bench's progress lines may write from another goroutine.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
