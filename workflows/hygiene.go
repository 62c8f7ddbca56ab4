package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/hygiene"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/capacity"
)

// rechecksPerRun is the default bound on one run's rechecks.
const rechecksPerRun = 500

// ClaimHygieneWorkflow follows one claim the scanner found (leaked, stuck, or on a lost node). It
// records the finding once as an Event, deletes a leaked template claim whose Pod is gone when the
// policy allows it and the breaker grants it (looking at the claim afresh, at its UID and version),
// and otherwise keeps the finding visible, looking again every Recheck, until the claim is fine
// or gone. A claim on a lost node is never touched until the node returns or is fenced.
func ClaimHygieneWorkflow(ctx workflow.Context, in api.ClaimHygieneInput) (api.ClaimHygieneStatus, error) {
	st := api.ClaimHygieneStatus{State: in.Finding.Kind, Finding: in.Finding}
	if err := workflow.SetQueryHandler(ctx, api.QueryState, func() (api.ClaimHygieneStatus, error) { return st, nil }); err != nil {
		return st, fmt.Errorf("register query: %w", err)
	}
	if in.Recheck <= 0 {
		in.Recheck = time.Minute
	}
	perRun := in.RechecksPerRun
	if perRun <= 0 {
		perRun = rechecksPerRun
	}
	// Each activity is a few reads and at most one write: a short timeout lets the next worker
	// retry soon after one dies mid-call.
	actx := stepOptions(ctx, 15*time.Second)
	claim := hygiene.HygieneInput{Namespace: in.Finding.Namespace, Claim: in.Finding.Claim, UID: in.Finding.UID, Policy: in.Policy}
	for checks := 0; ; checks++ {
		f := st.Finding
		if f.Kind == capacity.FindingNone {
			st.State = api.HygieneResolved
			return st, nil
		}
		st.State, st.Held = f.Kind, ""
		if f.Kind != in.Recorded {
			if err := workflow.ExecuteActivity(actx, hyg.RecordClaimFinding, f).Get(ctx, nil); err != nil {
				return st, err
			}
			in.Recorded = f.Kind
		}
		if f.Deletable {
			done, err := deleteLeaked(ctx, actx, claim, &st)
			if done || err != nil {
				return st, err
			}
			if st.Finding.Kind == capacity.FindingNone {
				continue
			}
		}
		if checks >= perRun || historyFull(ctx) {
			in.Finding = st.Finding
			return st, continueAsNew(ctx, ClaimHygieneWorkflow, in)
		}
		if err := workflow.Sleep(ctx, in.Recheck); err != nil {
			return st, err
		}
		var look hygiene.ClaimCheck
		if err := workflow.ExecuteActivity(actx, hyg.InspectClaim, claim).Get(ctx, &look); err != nil {
			return st, err
		}
		st.Checks++
		if look.Gone {
			st.State = api.HygieneGone
			return st, nil
		}
		st.Finding = look.Finding
	}
}

// deleteLeaked asks the breaker, then deletes the claim if a fresh look still finds it a leak
// that may go; done when the claim is gone either way.
func deleteLeaked(ctx, actx workflow.Context, claim hygiene.HygieneInput, st *api.ClaimHygieneStatus) (bool, error) {
	var permit breaker.PermitResult
	key := claim.Namespace + "/" + claim.Claim + "/" + claim.UID
	if err := workflow.ExecuteActivity(actx, rem.AcquirePermit, remediation.PermitInput{Claim: key, Action: breaker.ClaimDeleted}).Get(ctx, &permit); err != nil {
		return false, err
	}
	if !permit.Granted {
		st.State, st.Held = api.HygieneHeld, permit.Reason
		return false, nil
	}
	var res hygiene.ClaimCheck
	if err := workflow.ExecuteActivity(actx, hyg.DeleteLeakedClaim, claim).Get(ctx, &res); err != nil {
		return false, err
	}
	switch {
	case res.Deleted:
		st.State = api.HygieneDeleted
		return true, nil
	case res.Gone:
		st.State = api.HygieneGone
		return true, nil
	}
	// No longer a leak that may go: keep following it ("" ends it resolved).
	st.Finding, st.State = res.Finding, res.Finding.Kind
	return false, nil
}
