package workflows

import (
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/hygiene"
	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/activities/rollouts"
)

// registerActivities registers every domain's activities (empty: each test mocks what it runs).
func registerActivities(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivity(&remediation.Activities{})
	env.RegisterActivity(&migration.Activities{})
	env.RegisterActivity(&rollouts.Activities{})
	env.RegisterActivity(&hygiene.Activities{})
}
