//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// TestSlotOfATerminatedMigrationIsFreed: a migration holds a limiter slot and is terminated by
// hand, so it never releases it. The leader's check frees the slot, as an operator's release-slot
// signal had to before; a holder that still runs keeps its slot.
func TestSlotOfATerminatedMigrationIsFreed(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tc := shared.temporal
	holder := func(name string) string {
		// Any running workflow of the task queue stands for a migration: the limiter only signals it.
		id := "migrate/e2e-slots/" + name
		if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: api.TaskQueue},
			api.NodeWorkflow, api.NodeInput{Node: "e2e-slots-" + name}); err != nil {
			t.Fatal(err)
		}
		if err := (&api.LimiterClient{Client: tc}).Acquire(ctx, migrationplan.SlotRequest{ID: id, Node: "e2e-slots-" + name, PerNode: 1, ClusterWide: 100}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	holders := func() []string {
		var st migrationplan.SlotState
		if err := queryInto(ctx, tc, api.MigrationLimiterID, &st); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, h := range st.Holders {
			ids = append(ids, h.ID)
		}
		return ids
	}
	gone, running := holder("gone"), holder("running")
	eventually(t, 30*time.Second, "both hold a slot", func() error {
		if h := holders(); !slices.Contains(h, gone) || !slices.Contains(h, running) {
			return fmt.Errorf("holders %v", h)
		}
		return nil
	})
	if freed, err := app.ReleaseGoneSlots(ctx, tc); err != nil || len(freed) != 0 {
		t.Fatalf("while both run: freed %v, %v", freed, err)
	}
	if err := tc.TerminateWorkflow(ctx, gone, "", "terminated by hand"); err != nil {
		t.Fatal(err)
	}
	// The stack's own leader runs the same check every minute and may free it first.
	freed, err := app.ReleaseGoneSlots(ctx, tc)
	if err != nil || slices.Contains(freed, running) || len(freed) > 1 {
		t.Fatalf("after the termination: freed %v, %v; want at most %s", freed, err, gone)
	}
	eventually(t, 30*time.Second, "the terminated migration's slot freed, the running one's kept", func() error {
		if h := holders(); slices.Contains(h, gone) || !slices.Contains(h, running) {
			return fmt.Errorf("holders %v", h)
		}
		return nil
	})
	_ = tc.TerminateWorkflow(ctx, running, "", "test done")
	if _, err := app.ReleaseGoneSlots(ctx, tc); err != nil {
		t.Fatal(err)
	}
}
