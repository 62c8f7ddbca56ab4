package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/activities/rollouts"
)

// The activity options every workflow shares, named for what they are for. A retry policy is not
// part of a recorded history's determinism: changing one changes how a call is retried, never
// whether a history replays.

// kubeCallOptions are for short Kubernetes calls (a device's rules and checks, a migration's
// steps): 30 s each, retried from 200 ms backing off to 30 s, a rule name another object holds
// never retried.
func kubeCallOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			NonRetryableErrorTypes: []string{remediation.ErrRuleNameCollision},
		},
	})
}

// notifyOptions are for telling people (alerts, approval requests, records): 5 attempts, so a
// Slack outage never holds a decision back.
func notifyOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}})
}

// backoff retries every second at first, then backs off to 30 s between attempts; the error
// types named are not retried.
func backoff(nonRetryable ...string) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
		NonRetryableErrorTypes: nonRetryable}
}

// stepAttempts bounds the tries of each rollout and claim-hygiene step: about two and a half
// minutes of backing off. A rollout step that still fails holds the rollout blocked for a person.
const stepAttempts = 10

// stepOptions are for the steps of a rollout or a claim's hygiene: each may take timeout, a
// call that fails is retried, backing off, up to stepAttempts times; an error of a type named
// in nonRetryable is not retried.
func stepOptions(ctx workflow.Context, timeout time.Duration, nonRetryable ...string) workflow.Context {
	p := backoff(nonRetryable...)
	p.MaximumAttempts = stepAttempts
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: timeout, RetryPolicy: p})
}

// rolloutStepOptions are stepOptions with the errors no retry of a rollout step can fix.
func rolloutStepOptions(ctx workflow.Context, timeout time.Duration) workflow.Context {
	return stepOptions(ctx, timeout, rollouts.ErrInvalidRolloutInput, rollouts.ErrRolloutForbidden)
}

// gateRetry is for measuring a rollout's gates: 5 attempts (about a minute and a half in all); a
// plan the activity cannot measure (a phase it does not have) is not retried.
func gateRetry() *temporal.RetryPolicy {
	p := backoff(rollouts.ErrInvalidGateInput)
	p.MaximumAttempts = 5
	return p
}
