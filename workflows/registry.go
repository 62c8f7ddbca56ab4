package workflows

import "github.com/devicewarden/devicewarden/api"

// All maps every workflow type name of the contract to the function that implements it, for the
// worker to register and for the replay-coverage check to require a recorded history of each.
var All = map[string]any{
	api.DeviceWorkflow:           DeviceWorkflow,
	api.BreakerWorkflow:          BreakerWorkflow,
	api.NodeWorkflow:             NodeWorkflow,
	api.MigrateWorkflow:          MigrateWorkflow,
	api.MigrationLimiterWorkflow: MigrationLimiterWorkflow,
	api.RolloutWorkflow:          RolloutWorkflow,
	api.RolloutWindowWorkflow:    RolloutWindowWorkflow,
	api.ClaimHygieneWorkflow:     ClaimHygieneWorkflow,
}
