package sim

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/device"
)

// recoveryOf is the recovery action the simulated exporter shows for a GPU.
func recoveryOf(t *testing.T, cs *fake.Clientset, id device.ID, index string) string {
	t.Helper()
	for _, l := range scrape(t, &Exporter{Kube: cs}, "/metrics")["DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"] {
		if l["Hostname"] == id.Pool && l["gpu"] == index {
			return l["value"]
		}
	}
	t.Fatalf("no recovery action series for %s", id)
	return ""
}

// The driver's recovery action shows as dcgm-exporter's field 1523, per GPU, until a reboot of
// its node clears it.
func TestTheRecoveryActionShowsUntilAReboot(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewSimpleClientset(NodeSlice("node-a", 2, false), NodeSlice("node-b", 2, false), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	a1, b1 := device.ID{Driver: Driver, Pool: "node-a", Device: "gpu-1"}, device.ID{Driver: Driver, Pool: "node-b", Device: "gpu-1"}
	for _, id := range []device.ID{a1, b1} {
		if err := SetRecoveryAction(ctx, cs, id, RecoveryNodeReboot); err != nil {
			t.Fatal(err)
		}
	}
	if got := recoveryOf(t, cs, a1, "1"); got != "2" {
		t.Fatalf("recovery action %s, want 2", got)
	}
	if got := recoveryOf(t, cs, a1, "0"); got != "0" {
		t.Fatalf("another GPU shows %s", got)
	}
	if err := Reboot(ctx, cs, "node-a"); err != nil {
		t.Fatal(err)
	}
	if got := recoveryOf(t, cs, a1, "1"); got != "0" {
		t.Fatalf("after the reboot: %s", got)
	}
	if got := recoveryOf(t, cs, b1, "1"); got != "2" {
		t.Fatalf("another node's reboot cleared it: %s", got)
	}
	if err := SetRecoveryAction(ctx, cs, b1, 0); err != nil {
		t.Fatal(err)
	}
	if got := recoveryOf(t, cs, b1, "1"); got != "0" {
		t.Fatalf("cleared: %s", got)
	}
}
