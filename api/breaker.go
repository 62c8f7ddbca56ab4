package api

import (
	"time"

	"github.com/devicewarden/devicewarden/internal/breaker"
)

// PermitQueue is the task queue where one worker process answers the breaker's revocation of
// the permits it leased.
func PermitQueue(worker string) string { return "devicewarden-permits/" + worker }

// BreakerInput starts (or continues) the breaker workflow.
type BreakerInput struct {
	State *breaker.State `json:"state,omitempty"`
}

// BreakerSignal is the payload of the breaker's resume and pause signals.
type BreakerSignal struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason,omitempty"`
	// At is when the operator sent it: a pause and a resume that reach the breaker together are
	// applied in the order they were sent (signals on two channels arrive without an order).
	At time.Time `json:"at,omitzero"`
}

// ConfigureBreaker is the `configure` update's argument.
type ConfigureBreaker struct {
	Config breaker.Config `json:"config"`
	Owner  string         `json:"owner"`
}
