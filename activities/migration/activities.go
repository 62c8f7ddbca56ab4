// Package migration holds the activities that move workloads off a failed device: finding the
// workload, its Lease, the checkpoint handshake, eviction or suspension, waiting for it to run
// elsewhere, and the evidence kept of it.
package migration

import (
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// Activities move workloads. The worker builds it once.
type Activities struct {
	Kube kubernetes.Interface
	// Metrics may be nil in unit tests.
	Metrics *metrics.Metrics
	// OwnNamespace is DeviceWarden's own namespace: migration Leases and evidence ConfigMaps live
	// there, never in a tenant's (default "default").
	OwnNamespace string
	// Limiter queues migrations for the per-node and cluster-wide caps.
	Limiter MigrationLimiter
	// MigratePoll is how often migration waits look again (default 250 ms).
	MigratePoll time.Duration
}

func (a *Activities) ownNamespace() string { return kubeobj.Own(a.OwnNamespace) }
