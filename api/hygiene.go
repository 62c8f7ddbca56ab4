package api

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/capacity"
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
