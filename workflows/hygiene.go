package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/hygiene"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// ClaimHygieneIDPrefix starts the ID of every claim-hygiene workflow: one per claim UID.
const ClaimHygieneIDPrefix = "claim-hygiene/"

// ClaimHygieneID is the workflow ID of the claim with this UID.
func ClaimHygieneID(uid string) string { return ClaimHygieneIDPrefix + uid }

// Claim-hygiene states: the finding's kind while it stands, then how it ended.
const (
	HygieneHeld     = "held"     // a deletion the breaker refused; looked at again later
	HygieneDeleted  = "deleted"  // this workflow deleted the leaked claim
	HygieneGone     = "gone"     // the claim went (or was replaced) without this workflow
	HygieneResolved = "resolved" // the claim is fine again (a consumer came, the Pod started, the node returned)
)

// ClaimHygieneInput starts (or continues) the workflow of one finding.
type ClaimHygieneInput struct {
	Finding capacity.Finding       `json:"finding"`
	Policy  capacity.HygienePolicy `json:"policy"`
	// Recheck is how often a standing finding is looked at again.
	Recheck time.Duration `json:"recheck"`
	// Recorded is the finding kind already written as an Event (carried over continue-as-new).
	Recorded string `json:"recorded,omitempty"`
	// RechecksPerRun bounds one run's history (0: 500); a finding that stands longer continues
	// as new.
	RechecksPerRun int `json:"rechecksPerRun,omitempty"`
}

// ClaimHygieneStatus answers the state query and is the result. Finding keeps the ShareIDs, the
// claim's version and the reason of the latest look, whatever the state.
type ClaimHygieneStatus struct {
	State   string           `json:"state"`
	Finding capacity.Finding `json:"finding"`
	// Held is the breaker's reason while a deletion waits.
	Held   string `json:"held,omitempty"`
	Checks int    `json:"checks"`
}

// rechecksPerRun is the default bound on one run's rechecks.
const rechecksPerRun = 500

// ClaimHygieneWorkflow follows one claim the scanner found (leaked, stuck, or on a lost node). It
// records the finding once as an Event, deletes a leaked template claim whose Pod is gone when the
// policy allows it and the breaker grants it (looking at the claim afresh, at its UID and version),
// and otherwise keeps the finding visible, looking again every Recheck, until the claim is fine
// or gone. A claim on a lost node is never touched until the node returns or is fenced.
func ClaimHygieneWorkflow(ctx workflow.Context, in ClaimHygieneInput) (ClaimHygieneStatus, error) {
	st := ClaimHygieneStatus{State: in.Finding.Kind, Finding: in.Finding}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (ClaimHygieneStatus, error) { return st, nil }); err != nil {
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
			st.State = HygieneResolved
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
			st.State = HygieneGone
			return st, nil
		}
		st.Finding = look.Finding
	}
}

// deleteLeaked asks the breaker, then deletes the claim if a fresh look still finds it a leak
// that may go; done when the claim is gone either way.
func deleteLeaked(ctx, actx workflow.Context, claim hygiene.HygieneInput, st *ClaimHygieneStatus) (bool, error) {
	var permit policy.PermitResult
	key := claim.Namespace + "/" + claim.Claim + "/" + claim.UID
	if err := workflow.ExecuteActivity(actx, rem.AcquirePermit, remediation.PermitInput{Claim: key, Action: policy.ClaimDeleted}).Get(ctx, &permit); err != nil {
		return false, err
	}
	if !permit.Granted {
		st.State, st.Held = HygieneHeld, permit.Reason
		return false, nil
	}
	var res hygiene.ClaimCheck
	if err := workflow.ExecuteActivity(actx, hyg.DeleteLeakedClaim, claim).Get(ctx, &res); err != nil {
		return false, err
	}
	switch {
	case res.Deleted:
		st.State = HygieneDeleted
		return true, nil
	case res.Gone:
		st.State = HygieneGone
		return true, nil
	}
	// No longer a leak that may go: keep following it ("" ends it resolved).
	st.Finding, st.State = res.Finding, res.Finding.Kind
	return false, nil
}
