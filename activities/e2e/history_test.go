//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/devicewarden/devicewarden/activities/devicehistory"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// Eight GPUs of one node end their runs at once, each writing its entry into the node's one
// record. The real apiserver refuses the writes that lost the race (a resourceVersion conflict),
// the activity fails, and its retry (here a loop, in the worker Temporal's retry policy) writes
// again: every entry is there, none overwritten.
func TestHistoryWritesOfOneNodeAtOnceOnTheRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := &devicehistory.Activities{Kube: kube}
	now := time.Now().UTC().Truncate(time.Second)
	var wg sync.WaitGroup
	conflicts := make([]int, 8)
	for i := range 8 {
		wg.Go(func() {
			in := devicehistory.WriteInput{Node: "history-0", Device: device.ID{Driver: sim.Driver, Pool: "history-0", Device: fmt.Sprintf("gpu-%d", i)},
				History: decide.History{AppFaults: []time.Time{now.Add(-time.Duration(i) * time.Minute)}, AppFaultsTotal: i + 1}, Now: now}
			for ctx.Err() == nil {
				err := a.WriteDeviceHistory(ctx, in)
				if err == nil {
					return
				}
				if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
					t.Errorf("gpu-%d: %v", i, err)
					return
				}
				conflicts[i]++
			}
		})
	}
	wg.Wait()
	total := 0
	for i := range 8 {
		got, err := a.ReadDeviceHistory(ctx, devicehistory.ReadInput{Node: "history-0", Device: device.ID{Driver: sim.Driver, Pool: "history-0", Device: fmt.Sprintf("gpu-%d", i)}})
		if err != nil || got.AppFaultsTotal != i+1 || len(got.AppFaults) != 1 {
			t.Fatalf("gpu-%d reads %+v (%v)", i, got, err)
		}
		total += conflicts[i]
	}
	t.Logf("8 writes at once, %d refused for a conflict and written again", total)
}
