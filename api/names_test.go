package api

import "testing"

// Running rollouts and operators' commands find a rollout by this ID; it must not change.
func TestRolloutID(t *testing.T) {
	if got := RolloutID("gpu-a100"); got != "rollout/gpu-a100" {
		t.Fatalf("got %q", got)
	}
}
