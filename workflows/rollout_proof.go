package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// proofAttempts bounds the tries of one enforcement proof: a load that timed out or lost its
// result is run again, from a clean slate, twice more.
const proofAttempts = 3

// proofsKept is how many proof reports a rollout keeps.
const proofsKept = 20

// proofBlock refuses tenants' new claims of a phase that asks for a proof, letting the proof's
// own namespace through, before the phase is enabled.
func (r *rolloutRun) proofBlock(actx, ctx workflow.Context, ph rolloutplan.Phase) error {
	b := api.BlockInput{Rollout: r.plan.Name, Phase: ph.Name, Classes: ph.ClassNames(), Reason: "its enforcement proof has not passed yet",
		Except: ph.Enforcement.Namespace}
	if err := workflow.ExecuteActivity(actx, rol.BlockNewClaims, b).Get(ctx, nil); err != nil {
		return err
	}
	r.st.Blocks = appendBlock(r.st.Blocks, b)
	return nil
}

// prove runs the phase's enforcement proof. Proven, the phase's classes open to tenants and it
// soaks. Not proven, the plan's onUnenforced decides: whole-device rolls the phase back to the
// device plugin; approve waits for a person, who may let tenants in with the classes labelled
// soft quota, no QoS, or roll back.
func (r *rolloutRun) prove(ctx workflow.Context) error {
	ph := r.plan.Phases[r.st.Phase]
	if r.st.Unproven != ph.Name {
		reports, err := r.runProof(ctx, ph)
		if err != nil || reports == nil {
			return err // nil, nil: a command stopped the proof; the step loop acts on it
		}
		r.st.Proofs = keepLastProofs(append(r.st.Proofs, reports...), proofsKept)
		for _, rep := range reports {
			r.note(ctx, fmt.Sprintf("phase %s proof: %s", ph.Name, rep.Summary()))
		}
		if rolloutplan.Proven(reports) {
			iso := rollouts.IsolationInput{Classes: ph.SharedClassNames()}
			if err := workflow.ExecuteActivity(rolloutStepOptions(ctx, time.Minute), rol.MarkClassIsolation, iso).Get(ctx, nil); err != nil {
				return r.stuck(ctx, fmt.Sprintf("phase %s: proven, but taking the soft-quota label off its classes failed: %s", ph.Name, cause(err)))
			}
			return r.openToTenants(ctx, ph, fmt.Sprintf("enforcement proven on %d device(s)", len(reports)))
		}
		why := unproven(reports)
		if ph.Enforcement.OnUnenforced != rolloutplan.UnenforcedApprove {
			reason := fmt.Sprintf("phase %s: enforcement not proven: %s; it stays whole-device (routed back to the device plugin)", ph.Name, why)
			r.warn(ctx, decide.LevelCritical, fmt.Sprintf("rollout %s: %s", r.plan.Name, reason))
			return r.rollback(ctx, 1, reason)
		}
		r.st.Unproven = ph.Name
		r.warn(ctx, decide.LevelWarning, fmt.Sprintf("rollout %s: phase %s: enforcement not proven: %s; tenants wait: approve the phase to let them in as soft quota, no QoS, or roll it back", r.plan.Name, ph.Name, why))
	}
	return r.awaitSoftQuota(ctx, ph)
}

// runProof runs the proof activity, which a rollback or a pause stops (nil reports, nil error).
// A proof that cannot finish holds the rollout blocked with its tenants still refused.
func (r *rolloutRun) runProof(ctx workflow.Context, ph rolloutplan.Phase) ([]rolloutplan.ProofReport, error) {
	e := ph.Enforcement
	pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: e.Timeout.D(), HeartbeatTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 2, MaximumAttempts: proofAttempts,
			NonRetryableErrorTypes: []string{rollouts.ErrProofImpossible, rollouts.ErrInvalidRolloutInput, rollouts.ErrRolloutForbidden}}})
	pctx, cancel := workflow.WithCancel(pctx)
	defer cancel()
	r.st.State = rolloutplan.StateProving
	r.publish(ctx)
	r.note(ctx, fmt.Sprintf("phase %s: proving enforcement (%d tenants of %s %s, one of them noisy, on each driver version and node type)", ph.Name, e.Tenants, e.Share, e.Capacity))
	run := workflow.ExecuteActivity(pctx, rol.ProveEnforcement, rollouts.PhaseInput{Plan: r.plan, Phase: r.st.Phase})
	if err := workflow.Await(ctx, func() bool { return run.IsReady() || r.st.RollbackPending != nil || r.st.Paused }); err != nil {
		return nil, err
	}
	if !run.IsReady() {
		cancel()
		_ = run.Get(ctx, nil) // settles as cancelled; the activity removes its load Pods
		r.st.State = rolloutplan.StateRunning
		r.note(ctx, fmt.Sprintf("phase %s: its enforcement proof stopped for a command", ph.Name))
		return nil, nil
	}
	var reports []rolloutplan.ProofReport
	if err := run.Get(ctx, &reports); err != nil {
		r.st.State = rolloutplan.StateRunning
		return nil, r.stuck(ctx, fmt.Sprintf("phase %s: its enforcement proof did not finish: %s; tenants' claims of its classes stay refused (resume proves again)", ph.Name, cause(err)))
	}
	r.st.State = rolloutplan.StateRunning
	if len(reports) == 0 {
		return nil, r.stuck(ctx, fmt.Sprintf("phase %s: its enforcement proof found nothing to prove", ph.Name))
	}
	return reports, nil
}

// awaitSoftQuota waits for a person's approval of an unproven phase (or a rollback). Approved,
// the classes are labelled soft quota, no QoS, and opened to tenants.
func (r *rolloutRun) awaitSoftQuota(ctx workflow.Context, ph rolloutplan.Phase) error {
	r.st.Awaiting = ph.Name
	r.st.State = rolloutplan.StateWaitingApproval
	r.publish(ctx)
	in := notify.RolloutApprovalRequest{Rollout: r.plan.Name, Phase: ph.Name, Next: ph.Name + " as soft quota, no QoS",
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Channel: r.plan.SlackChannel,
		Summary: "enforcement NOT proven: " + unproven(r.st.Proofs) + ". Approving lets tenants share the devices with no isolation guarantee."}
	if err := workflow.ExecuteActivity(notifyOptions(ctx), rol.RequestRolloutApproval, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("approval request not posted", "error", err)
	}
	if err := workflow.Await(ctx, func() bool { return r.st.Awaiting == "" || r.st.RollbackPending != nil }); err != nil {
		return err
	}
	r.st.Unproven = ""
	if r.st.RollbackPending != nil {
		r.st.Awaiting = ""
		return nil
	}
	sq := r.st.SoftQuotas[len(r.st.SoftQuotas)-1]
	iso := rollouts.IsolationInput{Classes: sq.Classes, Soft: true, Note: fmt.Sprintf("soft quota, no QoS: rollout %s phase %s was not proven to hold tenants to their shares (%s); approved by %s at %s",
		r.plan.Name, ph.Name, sq.Proof, sq.Actor, sq.At.UTC().Format(time.RFC3339))}
	if err := workflow.ExecuteActivity(rolloutStepOptions(ctx, time.Minute), rol.MarkClassIsolation, iso).Get(ctx, nil); err != nil {
		return r.stuck(ctx, fmt.Sprintf("phase %s: approved, but labelling its classes soft quota failed: %s; tenants stay refused (resume proves again)", ph.Name, cause(err)))
	}
	return r.openToTenants(ctx, ph, fmt.Sprintf("approved by %s as soft quota, no QoS; classes %v labelled %s", sq.Actor, sq.Classes, "soft-quota-no-qos"))
}

// openToTenants lifts the phase's proof block, and the phase soaks.
func (r *rolloutRun) openToTenants(ctx workflow.Context, ph rolloutplan.Phase, how string) error {
	if err := r.unblock(rolloutStepOptions(ctx, 2*time.Minute), ctx, ph.Name); err != nil {
		return r.stuck(ctx, fmt.Sprintf("phase %s: opening its classes to tenants failed: %s (resume proves again)", ph.Name, cause(err)))
	}
	r.st.SoakUntil = workflow.Now(ctx).Add(ph.Soak.D())
	r.st.Step = rolloutplan.StepSoak
	r.st.State = rolloutplan.StateRunning
	r.note(ctx, fmt.Sprintf("phase %s open to tenants (%s); soaking until %s", ph.Name, how, r.st.SoakUntil.UTC().Format(time.RFC3339)))
	r.publish(ctx)
	return nil
}

// recordSoftQuota records a person's approval of an unproven phase (from the approve update).
func (r *rolloutRun) recordSoftQuota(ctx workflow.Context, c rolloutplan.Command) {
	ph := r.plan.Phases[r.st.Phase]
	r.st.SoftQuotas = append(r.st.SoftQuotas, api.SoftQuota{Phase: ph.Name, Classes: ph.SharedClassNames(), Actor: c.Actor,
		Reason: c.Reason, At: workflow.Now(ctx), Proof: unproven(r.st.Proofs)})
}

// unproven is why the newest reports that failed failed, in a line.
func unproven(reports []rolloutplan.ProofReport) string {
	for i := len(reports) - 1; i >= 0; i-- {
		if !reports[i].Enforced {
			return strings.TrimPrefix(reports[i].Summary(), "NOT enforced ")
		}
	}
	return "no failed proof recorded"
}

func keepLastProofs(rs []rolloutplan.ProofReport, n int) []rolloutplan.ProofReport {
	if len(rs) > n {
		return rs[len(rs)-n:]
	}
	return rs
}
