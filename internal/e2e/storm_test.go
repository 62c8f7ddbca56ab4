//go:build e2e

package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// stormToFirstRule reports every device of ids at once, the first unknown of them Unknown and the
// rest Unhealthy, and returns as the first DeviceTaintRule made after the call appears: the
// moment a test kills the process at work, whose workflow has likely not yet recorded it. wait
// waits for the reports' writes.
func stormToFirstRule(t *testing.T, ctx context.Context, kube kubernetes.Interface, ids []device.ID, unknown int) (wait func()) {
	t.Helper()
	list, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kube.ResourceV1().DeviceTaintRules().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var wg sync.WaitGroup
	for i, id := range ids {
		h := corev1.ResourceHealthStatusUnhealthy
		if i < unknown {
			h = corev1.ResourceHealthStatusUnknown
		}
		wg.Go(func() {
			if _, err := sim.SetHealth(ctx, kube, id, h, "storm"); err != nil {
				t.Error(err)
			}
		})
	}
	select {
	case <-w.ResultChan():
	case <-time.After(time.Minute):
		t.Fatal("no rule within a minute")
	}
	return wg.Wait
}

// ruled counts the devices of ids whose DeviceTaintRule exists.
func ruled(ctx context.Context, kube kubernetes.Interface, ids []device.ID) int {
	n := 0
	for _, id := range ids {
		if _, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{}); err == nil {
			n++
		}
	}
	return n
}

// ruleNames are the DeviceTaintRules' names of ids.
func ruleNames(ids []device.ID) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, id.TaintRuleName())
	}
	return out
}
