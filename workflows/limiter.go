package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// MigrationLimiterWorkflow (ID "devicewarden-migrations") is the semaphore every migration goes
// through: at most perNode migrations at once on a node and clusterWide in the cluster. Migrations
// ask with the acquire-slot signal and are answered with slot-granted; release-slot frees a slot.
// A migration that is gone when its turn comes (terminated, say) loses its slot to the next one.
func MigrationLimiterWorkflow(ctx workflow.Context, in api.LimiterInput) error {
	st := in.State
	if st == nil {
		st = &migrationplan.SlotState{}
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryState, func() (migrationplan.SlotState, error) { return *st, nil }); err != nil {
		return fmt.Errorf("register query: %w", err)
	}
	acquire := workflow.GetSignalChannel(ctx, api.SignalSlotAcquire)
	release := workflow.GetSignalChannel(ctx, api.SignalSlotRelease)
	for {
		var granted []string
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(acquire, func(c workflow.ReceiveChannel, _ bool) {
			var req migrationplan.SlotRequest
			c.Receive(ctx, &req)
			req.At = workflow.Now(ctx)
			granted = st.Acquire(req)
		})
		sel.AddReceive(release, func(c workflow.ReceiveChannel, _ bool) {
			var id string
			c.Receive(ctx, &id)
			granted = st.Release(id)
		})
		sel.Select(ctx)
		for len(granted) > 0 {
			id := granted[0]
			granted = granted[1:]
			if err := workflow.SignalExternalWorkflow(ctx, id, "", api.SignalSlotGranted, nil).Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Warn("migration gone before its slot; freeing it", "migration", id, "error", err)
				granted = append(granted, st.Release(id)...)
			}
		}
		if acquire.Len() == 0 && release.Len() == 0 && historyFull(ctx) {
			return continueAsNew(ctx, MigrationLimiterWorkflow, api.LimiterInput{State: st})
		}
	}
}
