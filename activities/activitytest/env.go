// Package activitytest runs activities in the SDK's activity test environment, for the unit
// tests of each activities package.
package activitytest

import "go.temporal.io/sdk/testsuite"

// Env is an activity test environment with acts (a struct of activities) registered.
func Env(acts any) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return env
}
