//go:build e2e

package e2e

import (
	"context"
	"os"
	"time"

	"github.com/devicewarden/devicewarden/internal/localcluster"
)

// runPrometheus runs a Prometheus in dir scraping each target every second; it returns its base
// URL once it is ready, and how to stop it.
func runPrometheus(ctx context.Context, dir string, targets ...string) (string, func(), error) {
	b := &localcluster.Builder{CacheDir: localcluster.DefaultCacheDir(), Out: os.Stderr}
	return b.Prometheus(ctx, dir, time.Second, targets...)
}
