package worker

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/breaker"
)

// Each domain gets the clients and settings it runs on; a rollout's alerts go through the
// remediation activities' Alert, which logs and counts them.
func TestNewActivitiesGivesEachDomainItsClients(t *testing.T) {
	kube := fake.NewClientset()
	cfg := breaker.DefaultConfig()
	a := NewActivities(Deps{Kube: kube, BreakerConfig: cfg, DryRun: true, KeepLeakedClaims: true, OwnNamespace: "dw"})
	r, m, ro, h := a.Remediation, a.Migration, a.Rollouts, a.Hygiene
	if r.Kube != kube || m.Kube != kube || ro.Kube != kube || h.Kube != kube {
		t.Error("a domain does not reach the cluster")
	}
	if !r.DryRun || !h.DryRun || !h.KeepLeakedClaims || r.BreakerConfig != cfg {
		t.Errorf("settings lost: remediation dry run %v, hygiene dry run %v keep %v, breaker %+v", r.DryRun, h.DryRun, h.KeepLeakedClaims, r.BreakerConfig)
	}
	if m.OwnNamespace != "dw" || ro.OwnNamespace != "dw" || h.OwnNamespace != "dw" {
		t.Errorf("own namespace: migration %q, rollouts %q, hygiene %q", m.OwnNamespace, ro.OwnNamespace, h.OwnNamespace)
	}
	if hi := a.History; hi.Kube != kube || hi.OwnNamespace != "dw" {
		t.Errorf("device history: kube %v, own namespace %q", hi.Kube == kube, hi.OwnNamespace)
	}
	if ro.Alerts != r {
		t.Error("rollout alerts do not go through the remediation activities")
	}
}
