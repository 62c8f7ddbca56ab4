package workflows

import (
	"github.com/devicewarden/devicewarden/activities/devicehistory"
	"github.com/devicewarden/devicewarden/activities/hygiene"
	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/activities/rollouts"
)

// The activities, by domain. Workflows name an activity by its method (rem.Quarantine); the
// worker registers the structs that run them, so these are never called here. An activity's
// type name is its method's name alone, so moving one between domains keeps recorded histories.
var (
	rem *remediation.Activities
	mig *migration.Activities
	rol *rollouts.Activities
	hyg *hygiene.Activities
	his *devicehistory.Activities
)
