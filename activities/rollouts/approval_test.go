package rollouts

import (
	"context"
	"testing"

	"github.com/devicewarden/devicewarden/internal/notify"
)

// approvals keeps the rollout approval requests posted.
type approvals struct {
	notify.Approver
	rollouts []notify.RolloutApprovalRequest
}

func (s *approvals) RequestRolloutApproval(_ context.Context, in notify.RolloutApprovalRequest) error {
	s.rollouts = append(s.rollouts, in)
	return nil
}

func TestRequestRolloutApproval(t *testing.T) {
	env, a, _ := activityEnv(t)
	req := notify.RolloutApprovalRequest{Rollout: "gpu-dra", Phase: "canary", Next: "wide"}
	if _, err := env.ExecuteActivity(a.RequestRolloutApproval, req); err != nil {
		t.Fatalf("without an approver (CLI only): %v", err)
	}
	to := &approvals{}
	a.Approvals = to
	if _, err := env.ExecuteActivity(a.RequestRolloutApproval, req); err != nil || len(to.rollouts) != 1 || to.rollouts[0].Phase != "canary" {
		t.Fatalf("posted %+v (%v)", to.rollouts, err)
	}
}
