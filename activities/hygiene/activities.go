// Package hygiene holds the activities that keep claims and capacity honest: claim hygiene (leaked,
// stuck and unknown allocations), capacity checks with their grant records, and fencing a lost node.
package hygiene

import (
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// Activities look after claims and capacity. The worker builds it once.
type Activities struct {
	Kube kubernetes.Interface
	// Metrics may be nil in unit tests.
	Metrics *metrics.Metrics
	// DryRun: leaked claims are reported, never deleted.
	DryRun bool
	// KeepLeakedClaims: this worker deletes no leaked claim (its --hygiene-delete-leaked is off).
	// Read at each look, so turning the setting off and restarting stops the claim-hygiene
	// workflows already running, whose input still says they may delete.
	KeepLeakedClaims bool
	// OwnNamespace is DeviceWarden's own namespace, where grant records live (default "default").
	OwnNamespace string
}

func (a *Activities) ownNamespace() string { return kubeobj.Own(a.OwnNamespace) }
